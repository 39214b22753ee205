//! The tenant router watcher (DESIGN's "watcher: tenant router ─ EventCorrelator(t)"): one
//! Broadcaster watcher that runs each event through its tenant's stage ([`crate::pipeline::stage`]) and
//! writes the result to every sink of that tenant with client-go's `recordToSink` retry policy.
//!
//! # Partitions
//! With `workers` > 1 the events are sharded by a partition key that every client-go key
//! contains ([`PartitionKey`]): each partition has its own tenant stages (LRU caches, token
//! buckets, plugin instances) and runs on its own task, so partitions use every core. Events of
//! one involved object stay in one partition, in Broadcaster order. Output differs from one
//! partition only under LRU pressure (each partition's caches hold `lru_cache_size` entries)
//! and in the interleaving of different objects' writes.
//!
//! # Sink writes
//! Each sink has a window of up to `max_in_flight` writes in flight. Events with different names
//! may be in flight together; one event's writes (its create, then its patches) go one at a
//! time, in order — except to a sink that keeps them in order itself
//! ([`EventSink::keeps_order`], the webhook), which gets them as they come, so that one event's
//! repeats share its requests; such a sink's window is at least what it bounds itself
//! ([`EventSink::max_in_flight`]) unless `max_in_flight` is 1.
//!
//! client-go's `UpdateState` after each successful write is split in two so that the output is
//! the same whatever the sinks' latency and concurrency ([`crate::correlator::logger`]): when an
//! event's writes are decided, in correlation order, the EventLogger takes the event as sent
//! (its recency, and the eviction it may cause, as client-go's sequential loop would); each
//! acknowledgement fills in the sink's copy without touching recency; a write that fails for
//! good takes back what its decision added. `max_in_flight = 1` is client-go's loop.
//!
//! Each sink has a delivery mode (its own, else the run's, [`RouterOptions::delivery`]): the
//! acknowledged prefix (at-least-once) waits only for the sinks in `at-least-once`; a sink in
//! `at-most-once` whose window is full drops the write (counted as `shed`) instead of waiting.
//!
//! # Routes
//! After the tenant's EventCorrelator decided a write, each route of the tenant
//! ([`crate::pipeline::routes`]) decides, on the correlated event, whether its sinks get the
//! write too (by the correlator's clock). A route's writes are jobs like the tenant's sinks'
//! (same windows, per-event order, delivery modes; an event is finished and acknowledged once
//! they ended too) but they never update the correlator state and count only for their sink
//! (`sinks`) and route (`routes`).
//!
//! # Config reloads
//! A new plan (the config file changed) is taken between two batches: tenants whose rules did
//! not change keep their stages; changed or new tenants start fresh; removed tenants are
//! dropped. Plugin swaps need no new plan: plugins are called through their slots.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::broadcaster::Watcher;
use crate::correlator::snapshot::{SnapshotRefused, TenantSnapshot};
use crate::correlator::{CorrelationClock, EventCorrelateResult, PREPARE_BATCH_SIZE, PendingState};
use crate::delivery::{Acknowledgements, DeliveryMode};
use crate::event::{Event, SharedEvent};
use crate::metrics::Counts;
pub use crate::partition::PartitionKey;
use crate::pipeline::plan::{TenantPlan, TenantSink, WATCH_CACHE_LABEL};
use crate::pipeline::routes::{RouteStats, routed};
use crate::pipeline::stage::{Staged, TenantStages};
use crate::pipeline::suppressed::SuppressedSummaries;
use crate::sink::retry::MAX_NAMED_MISSING_NAMESPACES;
use crate::sink::{EventSink, RetryPolicy, SinkError, SinkStats, StoredEvent, WriteOutcome};
use crate::tenant::routes::Admission;

/// How often a partition reading the wall clock closes due "N suppressed" windows while no
/// event comes.
const SUMMARY_TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// Default writes in flight per sink (`run --max-in-flight`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// What the tenant router watcher did, in total and per tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RouterStats {
    /// All tenants together.
    #[serde(flatten)]
    pub total: SinkStats,
    /// Drops by declarative rules, per tenant and rule name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub dropped_by_rule: BTreeMap<String, BTreeMap<String, u64>>,
    /// Events finished: every sink write ended (written, dropped, gave up, cancelled or shed),
    /// or nothing to write (filtered, skipped by the spam filter).
    pub finished: u64,
    /// Per tenant. Event outcomes (filtered, skipped, aggregated, dropped by rules or plugins)
    /// count once per event; write outcomes (created, patched, dropped, …) once per sink write.
    pub tenants: BTreeMap<String, SinkStats>,
    /// Per sink, labelled by its spec: the writes it was given and how they ended, and the
    /// aggregate events among them. The watch cache is apart (`watch_cache`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub sinks: BTreeMap<String, SinkStats>,
    /// The watch cache's writes (`run --serve`), as `sinks` counts a sink's; not in the totals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch_cache: Option<SinkStats>,
    /// Events dropped by a key-function plugin's fallback (`--plugin-fallback drop` / `fail`),
    /// per plugin and policy (`drop`, `fail`); filled in at the end of a run from the plugins'
    /// counters.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub dropped_by_plugin: BTreeMap<String, BTreeMap<String, u64>>,
    /// Writes the server rejected and `recordToSink` dropped, by reason
    /// ([`crate::sink::retry::rejection_reason`]: `AlreadyExists`, `NotFound`, …).
    pub rejected: BTreeMap<String, u64>,
    /// Writes dropped because their namespace does not exist (`404 namespaces "NAME" not
    /// found`), by namespace: at most [`MAX_NAMED_MISSING_NAMESPACES`] namespaces, the rest
    /// counted only in `rejected` (`NamespaceNotFound`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub missing_namespaces: BTreeMap<String, u64>,
    /// Plans taken after the first (config reloads).
    pub reloads: u64,
    /// Per route, by name ([`crate::pipeline::routes`]): the writes sent to its sinks and those
    /// it held back. A route's sink writes count in `sinks`, not in the totals or the tenants'.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub routes: BTreeMap<String, RouteStats>,
    /// Per sink, as `sinks`: how long each write took (nanoseconds), from its start to its
    /// outcome, retries included.
    #[serde(skip)]
    pub sink_write_durations: BTreeMap<String, Counts>,
}

impl RouterStats {
    fn tenant(&mut self, name: &str) -> &mut SinkStats {
        if !self.tenants.contains_key(name) {
            self.tenants.insert(name.to_string(), SinkStats::default()); // once per tenant, not per event
        }
        self.tenants.get_mut(name).expect("inserted above")
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &RouterStats) {
        self.total.add(&other.total);
        self.finished += other.finished;
        for (tenant, rules) in &other.dropped_by_rule {
            let mine = self.dropped_by_rule.entry(tenant.clone()).or_default();
            for (rule, n) in rules {
                *mine.entry(rule.clone()).or_default() += n;
            }
        }
        self.reloads += other.reloads;
        for (name, s) in &other.tenants {
            self.tenant(name).add(s);
        }
        for (label, s) in &other.sinks {
            self.sinks.entry(label.clone()).or_default().add(s);
        }
        if let Some(cache) = &other.watch_cache {
            self.watch_cache.get_or_insert_default().add(cache);
        }
        for (label, d) in &other.sink_write_durations {
            match self.sink_write_durations.get_mut(label) {
                Some(mine) => mine.add(d),
                None => {
                    self.sink_write_durations.insert(label.clone(), d.clone());
                }
            }
        }
        for (plugin, reasons) in &other.dropped_by_plugin {
            let mine = self.dropped_by_plugin.entry(plugin.clone()).or_default();
            for (reason, n) in reasons {
                *mine.entry(reason.clone()).or_default() += n;
            }
        }
        for (reason, n) in &other.rejected {
            *self.rejected.entry(reason.clone()).or_default() += n;
        }
        for (namespace, n) in &other.missing_namespaces {
            self.missing_namespace(namespace, *n);
        }
        for (route, s) in &other.routes {
            self.routes.entry(route.clone()).or_default().add(s);
        }
    }

    /// Counts `n` writes dropped for `namespace` not existing (within the bound).
    fn missing_namespace(&mut self, namespace: &str, n: u64) {
        let room = self.missing_namespaces.len() < MAX_NAMED_MISSING_NAMESPACES;
        match self.missing_namespaces.get_mut(namespace) {
            Some(count) => *count += n,
            None if room => {
                self.missing_namespaces.insert(namespace.to_string(), n);
            }
            None => {}
        }
    }
}

/// How the tenant router runs.
#[derive(Clone, Debug)]
pub struct RouterOptions {
    /// The sink retry policy (client-go `recordToSink`).
    pub retry: RetryPolicy,
    /// Fires to abandon pending retries (shutdown).
    pub cancel: CancellationToken,
    /// Which instant the correlators read.
    pub clock: CorrelationClock,
    /// Partitions, each on its own task (≥ 1).
    pub workers: usize,
    /// What an event's partition is computed from.
    pub partition_key: PartitionKey,
    /// Writes in flight per sink (≥ 1; 1 is client-go's one-at-a-time loop).
    pub max_in_flight: usize,
    /// Counts the events finished, as the acknowledged prefix (at-least-once delivery).
    pub acks: Arc<Acknowledgements>,
    /// The delivery mode of sinks that have none of their own.
    pub delivery: DeliveryMode,
    /// Live stats, updated after every batch (for `/metrics`); the final stats are returned too.
    pub stats: Arc<Mutex<RouterStats>>,
    /// Correlator snapshots of a single-host run (`--state-file`): restored at start, taken
    /// every interval and at the end ([`RouterSnapshots`]); `None`: none.
    pub snapshots: Option<RouterSnapshots>,
}

/// What a partition of the tenant router is fed ([`record_partitions`]; the router's own
/// partitioner feeds its partitions the same way).
#[derive(Debug)]
pub enum PartitionInput {
    /// Events, each with its sequence number in the acknowledgements ([`Acknowledgements`]).
    Batch(Vec<(u64, SharedEvent)>),
    /// Mark this point of the input: every tenant's correlator state right after the events fed
    /// so far is sent back at once, while their writes are still in flight (the input does not
    /// pause). It reflects exactly those events: what a write's acknowledgement adds to the
    /// EventLogger (`update_state` of a copy stored as sent) is already there, recency
    /// included. A single host saves it once every event before the mark is acknowledged.
    Mark(tokio::sync::oneshot::Sender<Vec<TenantSnapshot>>),
    /// Take a snapshot: every write of the earlier batches ends first (each sink acknowledged
    /// it, or it ended otherwise), then every tenant's correlator state is sent back — the
    /// state that reflects exactly the events fed so far.
    Snapshot(tokio::sync::oneshot::Sender<Vec<TenantSnapshot>>),
    /// The last snapshot before the input ends (a run's end, a worker's shutdown): as
    /// `Snapshot`, after every open "N suppressed" window's summary is written (as at the end of
    /// a run), so the state sent back has no open window and a restart does not write those
    /// summaries again.
    Finish(tokio::sync::oneshot::Sender<Vec<TenantSnapshot>>),
    /// Restore the tenants' correlator states (send before any batch); the answer says whether
    /// the snapshot was taken under the same rules (else the partition starts fresh).
    Restore(Vec<TenantSnapshot>, tokio::sync::oneshot::Sender<Result<(), SnapshotRefused>>),
}

/// Called with the events numbered so far (every one of them finished) and each partition's
/// correlator state, in partition order.
pub type SnapshotTaken = Arc<dyn Fn(u64, Vec<Vec<TenantSnapshot>>) + Send + Sync>;

/// Single-host correlator snapshots: every `interval` and every `every_events` events the
/// router's partitioner marks the input of every partition ([`PartitionInput::Mark`], no pause)
/// and gives the states to `taken`, in order, with the number of events numbered before the
/// mark (the position they reflect, once that many are acknowledged); once more when the input
/// ends, after every write ended ([`PartitionInput::Finish`]).
#[derive(Clone)]
pub struct RouterSnapshots {
    /// How often (also once at the end).
    pub interval: std::time::Duration,
    /// Events after which a mark comes before the interval passed (≥ 1), but no sooner than a
    /// tenth of the interval after the last one (at most ten marks an interval more).
    pub every_events: u64,
    /// Per partition, the state to start from (a restored snapshot); empty: all fresh.
    pub restore: Vec<Vec<TenantSnapshot>>,
    /// Where snapshots go.
    pub taken: SnapshotTaken,
    /// Counts partitions whose restored state was refused (other correlator options).
    pub refused: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for RouterSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterSnapshots")
            .field("interval", &self.interval)
            .field("restore", &self.restore.len())
            .finish()
    }
}

impl Default for RouterOptions {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            cancel: CancellationToken::new(),
            clock: CorrelationClock::Processing,
            workers: 1,
            partition_key: PartitionKey::SourceObject,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            acks: Arc::default(),
            delivery: DeliveryMode::Wait,
            stats: Arc::default(),
            snapshots: None,
        }
    }
}

/// The tenant router watcher's loop; ends, returning the stats, when the watcher closes and
/// every write has ended. `plans` delivers the current plan and every later one.
pub async fn record_to_tenants(
    mut watcher: Watcher<SharedEvent>,
    plans: watch::Receiver<Arc<TenantPlan>>,
    options: RouterOptions,
) -> RouterStats {
    let workers = options.workers.max(1);
    if let Some(snapshots) = options.snapshots.clone() {
        partition_with_snapshots(watcher, plans, options.clone(), snapshots).await;
    } else if workers == 1 {
        let input = Input::Watcher(watcher, options.acks.clone());
        Partition::new(plans, &options, true).run(input).await;
    } else {
        let mut senders = Vec::with_capacity(workers);
        let mut tasks = Vec::with_capacity(workers);
        for i in 0..workers {
            let (tx, rx) = mpsc::channel::<PartitionInput>(4);
            senders.push(tx);
            let partition = Partition::new(plans.clone(), &options, i == 0);
            tasks.push(tokio::spawn(partition.run(Input::Channel(rx))));
        }
        let (key, mut plans) = (options.partition_key, plans);
        while let Some(batch) = watcher.recv_batch(PREPARE_BATCH_SIZE).await {
            let plan = plans.borrow_and_update().clone();
            let mut shares: Vec<Vec<(u64, SharedEvent)>> = (0..workers).map(|_| Vec::new()).collect();
            for (seq, event) in options.acks.begin_many(batch.len()).zip(batch) {
                shares[plan.partition(&event, key, workers)].push((seq, event));
            }
            for (tx, share) in senders.iter().zip(shares) {
                if !share.is_empty() && tx.send(PartitionInput::Batch(share)).await.is_err() {
                    tracing::error!("a partition of the tenant router ended early");
                }
            }
        }
        drop(senders);
        for task in tasks {
            if let Err(error) = task.await {
                tracing::error!(%error, "a partition of the tenant router failed");
            }
        }
    }
    options.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The router with single-host snapshots: the partitioner of [`record_to_tenants`] (also for
/// one partition), which restores each partition's state first and pauses for a snapshot of
/// every partition every [`RouterSnapshots::interval`] and at the end.
async fn partition_with_snapshots(
    mut watcher: Watcher<SharedEvent>,
    mut plans: watch::Receiver<Arc<TenantPlan>>,
    options: RouterOptions,
    snapshots: RouterSnapshots,
) {
    let workers = options.workers.max(1);
    let mut senders = Vec::with_capacity(workers);
    let mut tasks = Vec::with_capacity(workers);
    for i in 0..workers {
        let (tx, rx) = mpsc::channel::<PartitionInput>(4);
        let partition = Partition::new(plans.clone(), &options, i == 0);
        tasks.push(tokio::spawn(partition.run(Input::Channel(rx))));
        if let Some(state) = snapshots.restore.get(i).filter(|s| !s.is_empty()) {
            let (answer, restored) = tokio::sync::oneshot::channel();
            let _ = tx.send(PartitionInput::Restore(state.clone(), answer)).await;
            if let Ok(Err(refused)) = restored.await {
                snapshots.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(partition = i, %refused, "correlator snapshot refused: the partition starts fresh");
                eprintln!("eventpipe: correlator snapshot of partition {i} refused, starting fresh: {refused}");
            }
        }
        senders.push(tx);
    }
    type Ask = fn(tokio::sync::oneshot::Sender<Vec<TenantSnapshot>>) -> PartitionInput;
    let take = |senders: &[mpsc::Sender<PartitionInput>], ask: Ask| {
        let asked: Vec<_> = senders
            .iter()
            .map(|tx| {
                let (answer, state) = tokio::sync::oneshot::channel();
                let tx = tx.clone();
                async move {
                    tx.send(ask(answer)).await.ok()?;
                    state.await.ok()
                }
            })
            .collect();
        futures_util::future::join_all(asked)
    };
    let mut begun = 0u64;
    let (mut marked, mut last_mark) = (0u64, tokio::time::Instant::now());
    let mut tick = tokio::time::interval(snapshots.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    // Marks whose states are still coming, in input order (each partition answers at once).
    let mut marks = futures_util::stream::FuturesOrdered::new();
    loop {
        tokio::select! {
            Some((at, states)) = marks.next(), if !marks.is_empty() => {
                if let Some(states) = states {
                    (snapshots.taken)(at, states);
                }
            }
            batch = watcher.recv_batch(PREPARE_BATCH_SIZE) => {
                let Some(batch) = batch else { break };
                let plan = plans.borrow_and_update().clone();
                let mut shares: Vec<Vec<(u64, SharedEvent)>> = (0..workers).map(|_| Vec::new()).collect();
                let seqs = options.acks.begin_many(batch.len());
                begun = begun.max(seqs.end);
                for (seq, event) in seqs.zip(batch) {
                    shares[plan.partition(&event, options.partition_key, workers)].push((seq, event));
                }
                for (tx, share) in senders.iter().zip(shares) {
                    if !share.is_empty() && tx.send(PartitionInput::Batch(share)).await.is_err() {
                        tracing::error!("a partition of the tenant router ended early");
                    }
                }
                if begun - marked >= snapshots.every_events.max(1) && last_mark.elapsed() >= snapshots.interval / 10 {
                    (marked, last_mark) = (begun, tokio::time::Instant::now());
                    marks.push_back(mark(&senders, begun).await);
                    tick.reset();
                }
            }
            _ = tick.tick() => {
                if begun > marked {
                    (marked, last_mark) = (begun, tokio::time::Instant::now());
                    marks.push_back(mark(&senders, begun).await);
                }
            }
        }
    }
    while let Some((at, states)) = marks.next().await {
        if let Some(states) = states {
            (snapshots.taken)(at, states);
        }
    }
    // The end of the input: a last snapshot, unless a shutdown cancelled writes (their events
    // are in the state but were not written: the marks before stand).
    let states: Option<Vec<_>> = take(&senders, PartitionInput::Finish).await.into_iter().collect();
    let cancelled = options.stats.lock().unwrap_or_else(|p| p.into_inner()).total.cancelled;
    if let (Some(states), 0) = (states, cancelled) {
        (snapshots.taken)(begun, states);
    }
    drop(senders);
    for task in tasks {
        if let Err(error) = task.await {
            tracing::error!(%error, "a partition of the tenant router failed");
        }
    }
}

/// The states of one mark, with the events numbered before it.
type Marked = (u64, Option<Vec<Vec<TenantSnapshot>>>);

/// Puts a [`PartitionInput::Mark`] into every partition's input after the events numbered so
/// far (`begun`), in order with the batches; returns what awaits the states (`None` when a
/// partition ended).
async fn mark(senders: &[mpsc::Sender<PartitionInput>], begun: u64) -> impl Future<Output = Marked> + use<> {
    let mut answers = Vec::with_capacity(senders.len());
    for tx in senders {
        let (answer, state) = tokio::sync::oneshot::channel();
        let _ = tx.send(PartitionInput::Mark(answer)).await; // a partition gone drops `answer`
        answers.push(state);
    }
    async move {
        let states = futures_util::future::join_all(answers).await;
        (begun, states.into_iter().map(Result::ok).collect())
    }
}

/// Runs one tenant-router partition per input until every input ends, each fed by the caller
/// ([`PartitionInput`]): a JetStream worker feeds each partition it consumes in stream order,
/// restores its state first and asks for snapshots. Returns the stats of all of them (also
/// published live into `options.stats`). `options.workers` and `options.partition_key` are
/// not used: the caller partitions.
pub async fn record_partitions(
    inputs: Vec<mpsc::Receiver<PartitionInput>>,
    plans: watch::Receiver<Arc<TenantPlan>>,
    options: RouterOptions,
) -> RouterStats {
    let tasks: Vec<_> = inputs
        .into_iter()
        .enumerate()
        .map(|(i, rx)| tokio::spawn(Partition::new(plans.clone(), &options, i == 0).run(Input::Channel(rx))))
        .collect();
    for task in tasks {
        if let Err(error) = task.await {
            tracing::error!(%error, "a partition of the tenant router failed");
        }
    }
    options.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Where a partition's batches come from, each event with its sequence number.
enum Input {
    /// The router watcher itself (one partition), numbering events as they come.
    Watcher(Watcher<SharedEvent>, Arc<Acknowledgements>),
    /// The partitioner's share for this partition, or a caller's feed.
    Channel(mpsc::Receiver<PartitionInput>),
}

impl Input {
    /// The next input; `None` at the end. Cancellation-safe.
    async fn next(&mut self) -> Option<PartitionInput> {
        match self {
            Input::Watcher(watcher, acks) => {
                let batch = watcher.recv_batch(PREPARE_BATCH_SIZE).await?;
                Some(PartitionInput::Batch(acks.begin_many(batch.len()).zip(batch).collect()))
            }
            Input::Channel(rx) => rx.recv().await,
        }
    }
}

/// One write of one event to one sink, ready to start.
struct Job {
    tenant: Arc<str>,
    seq: u64,
    sink: Arc<dyn EventSink>,
    /// The sink's label in per-sink counts.
    label: Arc<str>,
    /// The sink's delivery mode.
    delivery: DeliveryMode,
    /// The event's name, hashed: one event's writes go one at a time.
    key: u64,
    result: EventCorrelateResult,
    /// The EventLogger entry the write's `UpdateState` goes to (`None` for a summary).
    pending: Option<PendingState>,
    aggregated: bool,
    /// An "N suppressed" summary ([`crate::pipeline::suppressed`]): no source event to finish or
    /// acknowledge, no correlator state to update.
    summary: bool,
    /// A route's write ([`crate::pipeline::routes`]): counted for its sink only, never
    /// updating the correlator state (`pending` is `None`).
    route: bool,
}

/// How a [`Job`] ended.
struct Done {
    tenant: Arc<str>,
    seq: u64,
    sink: usize,
    label: Arc<str>,
    key: u64,
    aggregated: bool,
    outcome: WriteOutcome,
    stored: Option<StoredEvent>,
    /// As [`Job::pending`].
    pending: Option<PendingState>,
    /// Whether it was kept in flight (it did not end at once).
    in_flight: bool,
    /// Whether the acknowledged prefix waits for it (an at-least-once sink).
    gating: bool,
    /// As [`Job::summary`].
    summary: bool,
    /// As [`Job::route`].
    route: bool,
    /// How long the write took, from its start to its outcome (retries included).
    took: std::time::Duration,
}

type Write = Pin<Box<dyn Future<Output = Done> + Send>>;

/// One sink's writes: how many are in flight, which events (by a 64-bit hash of the name: two
/// names of one hash are only kept in order with each other, never lost), and the writes waiting
/// for an earlier write of the same event.
#[derive(Default)]
struct SinkWindow {
    in_flight: usize,
    busy: HashSet<u64, FastHash>,
    waiting: HashMap<u64, VecDeque<Job>, FastHash>,
}

/// The hasher of the router's maps, whose keys are hashes already (event names' xxh3), sequence
/// numbers or addresses: the LRU caches' fast hasher rather than SipHash.
type FastHash = lru::DefaultHasher;

/// The sink writes of one event still to end: all of them, and those the acknowledged prefix
/// waits for.
#[derive(Clone, Copy)]
struct Remaining {
    writes: usize,
    gating: usize,
    /// Writes to the tenant's own sinks (the others are routes'): those that update the
    /// correlator state.
    stateful: usize,
    /// A write of the event succeeded (its verb is counted in the totals, once).
    written: bool,
}

/// One partition: its tenant stages and its writes in flight.
struct Partition {
    plans: watch::Receiver<Arc<TenantPlan>>,
    stages: TenantStages,
    writes: FuturesUnordered<Write>,
    windows: HashMap<usize, SinkWindow, FastHash>,
    /// Per event with more than one sink write: the writes still to end, and how many of them
    /// are to at-least-once sinks.
    remaining: HashMap<u64, Remaining, FastHash>,
    /// What this partition counted since it last published, but the per-tenant counts.
    stats: RouterStats,
    /// The per-tenant counts since it last published.
    tenant_counts: TenantCounts,
    options: RouterOptions,
    /// Counts config reloads (one partition does, so a reload counts once).
    counts_reloads: bool,
    /// Open "N suppressed" windows.
    summaries: SuppressedSummaries,
    /// Events finished since the acknowledgements last heard of this partition: reported
    /// together ([`Partition::flush_acks`]), one lock per batch instead of one per event.
    acked: Vec<u64>,
    /// What every write reads: one reference count per write, not a copy of the policy and of
    /// the cancellation token (whose clone takes a lock).
    writes_read: Arc<(RetryPolicy, CancellationToken)>,
}

/// A partition's counts per tenant since it last published, found by the tenant name's `Arc`
/// (whose equality compares the pointers first: one comparison for the usual single tenant, by
/// name after a config reload) rather than by a lookup of the name in [`RouterStats::tenants`]
/// for every count of every event.
#[derive(Default)]
struct TenantCounts(Vec<(Arc<str>, SinkStats)>);

impl TenantCounts {
    /// The counts of tenant `name`.
    fn get(&mut self, name: &Arc<str>) -> &mut SinkStats {
        let i = match self.0.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                self.0.push((name.clone(), SinkStats::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }

    /// Moves the counts into `stats` (per tenant), leaving them zero.
    fn take_into(&mut self, stats: &mut RouterStats) {
        for (name, counts) in &mut self.0 {
            if *counts != SinkStats::default() {
                stats.tenant(name).add(&std::mem::take(counts));
            }
        }
    }
}

fn sink_id(sink: &Arc<dyn EventSink>) -> usize {
    Arc::as_ptr(sink).cast::<()>() as usize
}

impl Partition {
    fn new(mut plans: watch::Receiver<Arc<TenantPlan>>, options: &RouterOptions, counts_reloads: bool) -> Self {
        let plan = plans.borrow_and_update().clone();
        Self {
            plans,
            stages: TenantStages::new(plan),
            writes: FuturesUnordered::new(),
            windows: HashMap::default(),
            remaining: HashMap::default(),
            stats: RouterStats::default(),
            tenant_counts: TenantCounts::default(),
            options: options.clone(),
            counts_reloads,
            summaries: SuppressedSummaries::default(),
            acked: Vec::new(),
            writes_read: Arc::new((options.retry.clone(), options.cancel.clone())),
        }
    }

    /// Event `seq` is finished with nothing to write (filtered, dropped by a rule, skipped, or
    /// a tenant without sinks).
    fn finish_unwritten(&mut self, seq: u64) {
        self.stats.finished += 1;
        self.acked.push(seq);
    }

    /// Reports the events finished since the last call to the acknowledgements. Called after
    /// each input and each ended write, and before a snapshot is answered, so that the
    /// acknowledged prefix never lags the correlator state a snapshot hands over.
    fn flush_acks(&mut self) {
        if !self.acked.is_empty() {
            self.options.acks.ack_many(&self.acked);
            self.acked.clear();
        }
    }

    async fn run(mut self, mut input: Input) {
        // With the wall clock, open summary windows close on time even when no event comes.
        let mut tick = tokio::time::interval(SUMMARY_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let wall_clock = self.options.clock == CorrelationClock::Processing;
        loop {
            tokio::select! {
                biased;
                Some(done) = self.writes.next(), if !self.writes.is_empty() => self.complete(done),
                input = input.next() => match input {
                    Some(PartitionInput::Batch(batch)) => {
                        self.process(batch).await;
                        // A busy partition lets the sinks' own tasks (a webhook's batcher and
                        // requests) run between batches rather than only when its input runs dry.
                        tokio::task::yield_now().await;
                    }
                    Some(PartitionInput::Mark(answer)) => {
                        let _ = answer.send(self.snapshot());
                    }
                    Some(PartitionInput::Snapshot(answer)) => self.answer_snapshot(answer, false).await,
                    Some(PartitionInput::Finish(answer)) => self.answer_snapshot(answer, true).await,
                    Some(PartitionInput::Restore(state, answer)) => {
                        let _ = answer.send(self.restore(state));
                    }
                    None => break,
                },
                _ = tick.tick(), if wall_clock && !self.summaries.is_empty() => {
                    let due = self.summaries.due(chrono::Utc::now());
                    self.emit_summaries(due).await;
                }
            }
            self.flush_acks();
            self.publish();
        }
        // The run ends: every open window's summary goes out now.
        let due = self.summaries.flush();
        self.emit_summaries(due).await;
        self.drain().await;
    }

    /// Lets every write in flight end, reporting each to the acknowledgements and the live
    /// stats as it ends (a shutdown timeout may cut the drain short: what ended counts).
    async fn drain(&mut self) {
        while let Some(done) = self.writes.next().await {
            self.complete(done);
            self.flush_acks();
            self.publish();
        }
        self.flush_acks();
        self.publish();
    }

    /// Lets every write end (after writing every open window's summary when `finish`), then
    /// sends back the state.
    async fn answer_snapshot(&mut self, answer: tokio::sync::oneshot::Sender<Vec<TenantSnapshot>>, finish: bool) {
        if finish {
            let due = self.summaries.flush();
            self.emit_summaries(due).await;
        }
        self.drain().await;
        let _ = answer.send(self.snapshot());
    }

    /// Every tenant's correlator state with its open "N suppressed" windows.
    fn snapshot(&self) -> Vec<TenantSnapshot> {
        let mut tenants = self.stages.snapshot();
        for t in &mut tenants {
            t.summaries = self.summaries.export(&t.tenant);
        }
        tenants
    }

    /// Restores the tenants' correlator states and, when they are taken, their open
    /// "N suppressed" windows.
    fn restore(&mut self, mut tenants: Vec<TenantSnapshot>) -> Result<(), SnapshotRefused> {
        let windows: Vec<_> =
            tenants.iter_mut().map(|t| (t.tenant.clone(), std::mem::take(&mut t.summaries))).collect();
        self.stages.restore(tenants)?;
        let plan = self.stages.plan().clone();
        for (tenant, windows) in windows {
            if let Some(t) = self.stages.position(&tenant) {
                self.summaries.import(&plan.tenants[t].name, windows);
            }
        }
        Ok(())
    }

    /// Adds what this partition counted since the last call to the shared stats.
    fn publish(&mut self) {
        let mut delta = std::mem::take(&mut self.stats);
        self.tenant_counts.take_into(&mut delta);
        self.options.stats.lock().unwrap_or_else(|p| p.into_inner()).add(&delta);
    }

    async fn process(&mut self, batch: Vec<(u64, SharedEvent)>) {
        if self.plans.has_changed().unwrap_or(false) {
            let plan = self.plans.borrow_and_update().clone();
            self.stages.adopt(plan);
            self.stats.reloads += u64::from(self.counts_reloads);
        }
        let clock = self.options.clock;
        let (seqs, occurrences): (Vec<(u64, bool)>, Vec<_>) = batch
            .into_iter()
            .map(|(s, e)| {
                let already_aggregated = e.message.starts_with(crate::correlator::keys::COMBINED_MESSAGE_PREFIX);
                ((s, already_aggregated), clock.occurrence(Arc::unwrap_or_clone(e)))
            })
            .unzip();
        let staged = self.stages.prepare(occurrences);
        let plan = self.stages.plan().clone();
        for ((t, staged), (seq, already_aggregated)) in staged.into_iter().zip(seqs) {
            let tenant = &plan.tenants[t];
            self.stats.total.received += 1;
            self.tenant_counts.get(&tenant.name).received += 1;
            if already_aggregated {
                self.stats.total.already_aggregated += 1;
                self.tenant_counts.get(&tenant.name).already_aggregated += 1;
            }
            let prepared = match staged {
                Staged::Filtered { .. } => {
                    self.stats.total.filtered += 1;
                    self.tenant_counts.get(&tenant.name).filtered += 1;
                    self.finish_unwritten(seq);
                    continue;
                }
                Staged::Dropped { rule } => {
                    self.stats.total.dropped_by_rules += 1;
                    self.tenant_counts.get(&tenant.name).dropped_by_rules += 1;
                    let rules = match self.stats.dropped_by_rule.get_mut(&*tenant.name) {
                        Some(rules) => rules,
                        None => self.stats.dropped_by_rule.entry(tenant.name.to_string()).or_default(),
                    };
                    match rules.get_mut(&*rule) {
                        Some(n) => *n += 1,
                        None => {
                            rules.insert(rule.to_string(), 1);
                        }
                    }
                    self.finish_unwritten(seq);
                    continue;
                }
                Staged::Prepared(p) => p,
            };
            let aggregated = prepared.aggregated();
            let seconds = tenant.rules.suppressed_summary_seconds;
            // "N suppressed" windows, only when some tenant uses them: the correlator's time of
            // this event closes what is due before it, and a skipped event is counted.
            let now =
                (seconds > 0 || !self.summaries.is_empty()).then(|| prepared.clock().unwrap_or_else(chrono::Utc::now));
            if let Some(now) = now {
                let due = self.summaries.due(now);
                self.emit_summaries(due).await;
            }
            if prepared.spam_exempt() {
                self.stats.total.spam_exempted += 1;
                self.tenant_counts.get(&tenant.name).spam_exempted += 1;
            }
            let summaries = &mut self.summaries;
            let state_key = prepared.state_key();
            let route_clock = prepared.clock();
            let dropped_by_plugin = prepared.dropped();
            // Counted once per event, however many sinks it goes to.
            if aggregated {
                self.stats.total.aggregated += 1;
                self.tenant_counts.get(&tenant.name).aggregated += 1;
            }
            let result = self.stages.finish_noting_skip(t, prepared, |event| {
                if let (Some(now), true) = (now, seconds > 0) {
                    summaries.record(&tenant.name, seconds, event, now);
                }
            });
            let sinks = tenant.sinks();
            let (key, pending) = match &result.event {
                Some(event) if !result.skip && !sinks.is_empty() => (
                    xxhash_rust::xxh3::xxh3_64(event.metadata.name.as_bytes()),
                    self.stages.stage_mut(t).begin_write(event, state_key),
                ),
                _ => {
                    // Once per event: a key function's fallback drop, else a spam-filter skip.
                    if dropped_by_plugin {
                        self.stats.total.dropped_by_plugins += 1;
                        self.tenant_counts.get(&tenant.name).dropped_by_plugins += 1;
                    } else if !sinks.is_empty() {
                        self.stats.total.skipped += 1;
                        self.tenant_counts.get(&tenant.name).skipped += 1;
                    }
                    self.finish_unwritten(seq);
                    continue;
                }
            };
            // The tenant's routes: which of them send this write too, decided on the correlated
            // event (the tenant's own writes are unchanged).
            let mut route_writes: Vec<(usize, EventCorrelateResult)> = Vec::new();
            if !tenant.routes().is_empty() {
                let event = result.event.as_deref().expect("a write has an event");
                let now = route_clock.unwrap_or_else(chrono::Utc::now);
                for (r, route) in tenant.routes().iter().enumerate() {
                    let planned = &plan.routes[route.route];
                    let admission = planned.admit(event, now);
                    if admission == Admission::Unmatched {
                        continue;
                    }
                    let stats = match self.stats.routes.get_mut(&*planned.route.name) {
                        Some(stats) => stats,
                        None => self.stats.routes.entry(planned.route.name.to_string()).or_default(),
                    };
                    stats.count(admission);
                    if let Admission::Send { held_back } = admission
                        && !route.sinks.is_empty()
                    {
                        route_writes.push((r, routed(&result, held_back)));
                    }
                }
            }
            let default = self.options.delivery;
            let at_least_once = |s: &&TenantSink| s.delivery.unwrap_or(default) == DeliveryMode::AtLeastOnce;
            let route_sinks = || route_writes.iter().flat_map(|(r, _)| &tenant.routes()[*r].sinks);
            let gating = sinks.iter().filter(at_least_once).count() + route_sinks().filter(at_least_once).count();
            let writes = sinks.len() + route_sinks().count();
            if writes > 1 {
                self.remaining.insert(seq, Remaining { writes, gating, stateful: sinks.len(), written: false });
            }
            // The result is cloned for all sinks but the last, which takes it.
            let mut result = Some(result);
            for (i, sink) in sinks.iter().enumerate() {
                let result = if i + 1 == sinks.len() { result.take() } else { result.clone() };
                let job = Job {
                    tenant: tenant.name.clone(),
                    seq,
                    sink: sink.sink.clone(),
                    label: tenant.sink_labels()[i].clone(),
                    delivery: sink.delivery.unwrap_or(default),
                    key,
                    result: result.expect("taken only for the last sink"),
                    pending: Some(pending),
                    aggregated,
                    summary: false,
                    route: false,
                };
                self.submit(job).await;
            }
            for (r, result) in route_writes {
                let route = &tenant.routes()[r];
                for (i, sink) in route.sinks.iter().enumerate() {
                    let job = Job {
                        tenant: tenant.name.clone(),
                        seq,
                        sink: sink.sink.clone(),
                        label: route.labels[i].clone(),
                        delivery: sink.delivery.unwrap_or(default),
                        key,
                        result: result.clone(),
                        pending: None,
                        aggregated,
                        summary: false,
                        route: true,
                    };
                    self.submit(job).await;
                }
            }
            if gating == 0 {
                self.acked.push(seq);
            }
            if self.options.max_in_flight == 1 {
                // client-go's loop: the write (and `update_state`) ends before the next event.
                // What ended is reported at once, not after the batch: against a slow sink a
                // batch takes minutes, and the saved position and live counts would wait.
                let mut ended = false;
                while let Some(done) = self.writes.next().await {
                    self.complete(done);
                    ended = true;
                }
                if ended {
                    self.flush_acks();
                    self.publish();
                }
            }
        }
    }

    /// Writes "N suppressed" summaries to their tenants' sinks (a tenant gone with a config
    /// reload takes its summaries with it).
    async fn emit_summaries(&mut self, due: Vec<(Arc<str>, Event)>) {
        if due.is_empty() {
            return;
        }
        let plan = self.stages.plan().clone();
        for (name, event) in due {
            let Some(tenant) = plan.tenants.iter().find(|t| t.name == name) else { continue };
            self.stats.total.suppressed_summaries += 1;
            self.tenant_counts.get(&tenant.name).suppressed_summaries += 1;
            let key = xxhash_rust::xxh3::xxh3_64(event.metadata.name.as_bytes());
            let result = EventCorrelateResult { skip: false, event: Some(Box::new(event)), patch: None };
            for (sink, label) in tenant.sinks().iter().zip(tenant.sink_labels()) {
                let job = Job {
                    tenant: tenant.name.clone(),
                    seq: 0,
                    sink: sink.sink.clone(),
                    label: label.clone(),
                    delivery: sink.delivery.unwrap_or(self.options.delivery),
                    key,
                    result: result.clone(),
                    pending: None,
                    aggregated: false,
                    summary: true,
                    route: false,
                };
                self.submit(job).await;
            }
        }
    }

    /// Counts one write's outcome: for its sink (`label`), and in total and for its tenant — a
    /// written one's verb only for the event's first write to succeed, so that an event written
    /// by several sinks counts once. The sink's figures also count the aggregate events it was
    /// given. The watch cache's writes are counted apart.
    fn count(&mut self, done: &Done) {
        let Done { tenant, label, aggregated, outcome, seq, summary, route, .. } = done;
        let aggregated = *aggregated;
        if &**label == WATCH_CACHE_LABEL {
            let cache = self.stats.watch_cache.get_or_insert_default();
            cache.aggregated += u64::from(aggregated);
            cache.count(outcome);
            return;
        }
        if let WriteOutcome::Dropped { error, .. } = outcome {
            *self.stats.rejected.entry(crate::sink::retry::rejection_reason(error)).or_default() += 1;
            if let SinkError::Status(status) = error
                && let Some(namespace) = status.missing_namespace()
            {
                self.stats.missing_namespace(namespace, 1);
            }
        }
        let first_written = match self.remaining.get_mut(seq) {
            Some(left) if !summary && !route && matches!(outcome, WriteOutcome::Written { .. }) => {
                !std::mem::replace(&mut left.written, true)
            }
            _ => true,
        };
        if *route {
            // A route's write counts for its sink (below) and its route only.
        } else if first_written {
            self.tenant_counts.get(tenant).count(outcome);
            self.stats.total.count(outcome);
        } else {
            self.tenant_counts.get(tenant).count_unless_written(outcome);
            self.stats.total.count_unless_written(outcome);
        }
        let sink = match self.stats.sinks.get_mut(&**label) {
            Some(sink) => sink,
            None => self.stats.sinks.entry(label.to_string()).or_default(),
        };
        sink.aggregated += u64::from(aggregated);
        sink.count(outcome);
    }

    /// Counts one ended write's duration for its sink (`label`).
    fn time_write(&mut self, label: &Arc<str>, took: std::time::Duration) {
        let durations = match self.stats.sink_write_durations.get_mut(&**label) {
            Some(durations) => durations,
            None => self
                .stats
                .sink_write_durations
                .entry(label.to_string())
                .or_insert_with(|| Counts::new(crate::metrics::histogram::WRITE_BOUNDS)),
        };
        durations.observe_duration(took);
    }

    /// Starts `job` once its sink has room and no earlier write of the same event is in flight
    /// (or, for a sink that keeps one event's writes in order itself, at once).
    async fn submit(&mut self, job: Job) {
        let id = sink_id(&job.sink);
        let max_in_flight = match self.options.max_in_flight {
            1 => 1,
            n => n.max(job.sink.max_in_flight().unwrap_or(0)),
        };
        let pipelined = max_in_flight > 1 && job.sink.keeps_order();
        let window = self.windows.entry(id).or_default();
        if !pipelined && window.busy.contains(&job.key) {
            window.waiting.entry(job.key).or_default().push_back(job);
            return;
        }
        let full = move |w: &SinkWindow| w.in_flight >= max_in_flight;
        if job.delivery == DeliveryMode::AtMostOnce && full(window) {
            if let (Some(pending), Some(t), false) =
                (job.pending, self.stages.position(&job.tenant), !self.sole_stateful_write(job.seq))
            {
                self.stages.stage_mut(t).abandon_write(pending); // never written
            }
            if job.route {
                self.stats.sinks.entry(job.label.to_string()).or_default().shed += 1;
            } else {
                self.tenant_counts.get(&job.tenant).shed += 1;
                self.stats.total.shed += 1;
            }
            self.write_ended(job.seq, false, job.summary);
            return;
        }
        while self.windows.get(&id).is_some_and(full) {
            match self.writes.next().await {
                Some(done) => {
                    // Waiting for the sink: what ended is reported at once, not after the batch.
                    self.complete(done);
                    self.flush_acks();
                    self.publish();
                }
                None => break,
            }
        }
        if let Some(done) = self.start(job) {
            self.complete(done);
        }
    }

    /// Starts a write; returns it when it ended at once (a synchronous sink), else keeps it in
    /// flight.
    fn start(&mut self, job: Job) -> Option<Done> {
        let Job { tenant, seq, sink, label, delivery, key, result, pending, aggregated, summary, route } = job;
        let gating = delivery == DeliveryMode::AtLeastOnce;
        let id = sink_id(&sink);
        let read = self.writes_read.clone();
        let window = self.windows.entry(id).or_default();
        if !sink.keeps_order() {
            window.busy.insert(key);
        }
        let mut write: Write = Box::pin(async move {
            let (retry, cancel) = &*read;
            let started = std::time::Instant::now();
            let (outcome, stored) = sink.write(result, retry, cancel).await;
            let took = started.elapsed();
            Done {
                tenant,
                seq,
                sink: id,
                label,
                key,
                aggregated,
                outcome,
                stored,
                pending,
                in_flight: false,
                gating,
                summary,
                route,
                took,
            }
        });
        match write.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop())) {
            Poll::Ready(done) => Some(done),
            Poll::Pending => {
                window.in_flight += 1;
                self.writes.push(Box::pin(async move { Done { in_flight: true, ..write.await } }));
                None
            }
        }
    }

    /// Accounts for ended writes, starting the next write of the same event on the same sink.
    fn complete(&mut self, done: Done) {
        // An ended write starts at most one more (the next write of the same event), which may
        // end at once in turn.
        let mut ended = Some(done);
        while let Some(done) = ended.take() {
            self.count(&done);
            self.time_write(&done.label, done.took);
            if let (Some(pending), Some(t)) = (done.pending, self.stages.position(&done.tenant)) {
                match &done.stored {
                    Some(stored) => self.stages.stage_mut(t).complete_write(pending, stored.event()),
                    // client-go's one sink per correlator: only an event's only write takes back
                    // what its decision added.
                    None if self.sole_stateful_write(done.seq) => self.stages.stage_mut(t).abandon_write(pending),
                    None => {}
                }
            }
            let window = self.windows.get_mut(&done.sink).expect("a window per started write");
            window.busy.remove(&done.key);
            window.in_flight -= usize::from(done.in_flight);
            let next = match window.waiting.get_mut(&done.key) {
                Some(queue) => {
                    let job = queue.pop_front();
                    if queue.is_empty() {
                        window.waiting.remove(&done.key);
                    }
                    job
                }
                None => None,
            };
            self.write_ended(done.seq, done.gating, done.summary);
            if let Some(job) = next {
                ended = self.start(job);
            }
        }
    }

    /// Whether event `seq`'s write to the tenant's own sinks is its only one (its routes'
    /// writes aside): then a write that fails for good takes back what its decision added, as
    /// client-go's one sink per correlator.
    fn sole_stateful_write(&self, seq: u64) -> bool {
        self.remaining.get(&seq).is_none_or(|left| left.stateful == 1)
    }

    /// One write of event `seq` ended (or was shed): the event is finished after its last
    /// write, and acknowledged after its last write to an at-least-once sink (`gating`).
    fn write_ended(&mut self, seq: u64, gating: bool, summary: bool) {
        if summary {
            return;
        }
        let Some(left) = self.remaining.get_mut(&seq) else {
            // The event's only write.
            self.stats.finished += 1;
            if gating {
                self.acked.push(seq);
            }
            return;
        };
        left.writes -= 1;
        if gating {
            left.gating -= 1;
            if left.gating == 0 {
                self.acked.push(seq);
            }
        }
        if left.writes == 0 {
            self.remaining.remove(&seq);
            self.stats.finished += 1;
        }
    }
}

impl crate::metrics::Snapshot {
    /// Adds the tenant router watcher's counters: per tenant routed, writes by verb, failures
    /// by outcome, retries, spam skips, aggregations, filter-plugin drops, spam exemptions and
    /// "N suppressed" summaries; drops per declarative rule; rejections per reason; write
    /// outcomes and write durations per sink; `reloads` as applied config reloads; per route the
    /// writes sent and held back (by reason).
    pub fn add_router(&mut self, stats: &RouterStats) {
        use crate::metrics::{
            AGGREGATED, ALREADY_AGGREGATED, CONFIG_RELOADS, FILTERED, RECORD_RETRIES, ROUTE_HELD_BACK, ROUTE_SENT,
            ROUTED, RULE_DROPPED, SINK_OUTCOMES, SINK_REJECTED, SINK_WRITE_DURATION, SINK_WRITES, SPAM_EXEMPTED,
            SPAM_SKIPPED, SUPPRESSED_SUMMARIES, WRITE_FAILURES,
        };
        for (tenant, s) in &stats.tenants {
            let tenant = tenant.as_str();
            self.add(&ROUTED, &[("tenant", tenant)], s.received);
            self.add(&SINK_WRITES, &[("tenant", tenant), ("verb", "create")], s.created);
            self.add(&SINK_WRITES, &[("tenant", tenant), ("verb", "patch")], s.patched);
            if s.series_counted > 0 {
                self.add(&SINK_WRITES, &[("tenant", tenant), ("verb", "series_counted")], s.series_counted);
            }
            for (outcome, n) in
                [("dropped", s.dropped), ("gave_up", s.gave_up), ("cancelled", s.cancelled), ("shed", s.shed)]
            {
                self.add(&WRITE_FAILURES, &[("tenant", tenant), ("outcome", outcome)], n);
            }
            for (family, n) in [
                (&RECORD_RETRIES, s.retries),
                (&SPAM_SKIPPED, s.skipped),
                (&AGGREGATED, s.aggregated),
                (&ALREADY_AGGREGATED, s.already_aggregated),
                (&FILTERED, s.filtered),
                (&SPAM_EXEMPTED, s.spam_exempted),
                (&SUPPRESSED_SUMMARIES, s.suppressed_summaries),
            ] {
                self.add(family, &[("tenant", tenant)], n);
            }
        }
        for (tenant, rules) in &stats.dropped_by_rule {
            for (rule, n) in rules {
                self.add(&RULE_DROPPED, &[("tenant", tenant), ("rule", rule)], *n);
            }
        }
        for (reason, n) in &stats.rejected {
            self.add(&SINK_REJECTED, &[("reason", reason)], *n);
        }
        let watch_cache = stats.watch_cache.iter().map(|s| (WATCH_CACHE_LABEL, s));
        for (sink, s) in stats.sinks.iter().map(|(label, s)| (label.as_str(), s)).chain(watch_cache) {
            for (outcome, n) in [
                ("create", s.created),
                ("patch", s.patched),
                ("dropped", s.dropped),
                ("gave_up", s.gave_up),
                ("cancelled", s.cancelled),
                ("shed", s.shed),
            ] {
                self.add(&SINK_OUTCOMES, &[("sink", sink), ("outcome", outcome)], n);
            }
        }
        for (sink, durations) in &stats.sink_write_durations {
            self.add_histogram(&SINK_WRITE_DURATION, &[("sink", sink)], durations);
        }
        self.add(&CONFIG_RELOADS, &[("result", "applied")], stats.reloads);
        for (route, s) in &stats.routes {
            self.add(&ROUTE_SENT, &[("route", route)], s.sent);
            self.add(&ROUTE_HELD_BACK, &[("route", route), ("reason", "min_count")], s.held_back_min_count);
            self.add(&ROUTE_HELD_BACK, &[("route", route), ("reason", "rate")], s.held_back_rate);
        }
    }
}
