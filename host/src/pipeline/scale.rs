//! Scale-out on NATS JetStream ([`crate::nats`]): a publish tier and a worker tier, with exact
//! per-key semantics and correlator state that survives restarts.
//!
//! ```text
//!  publisher (run --sink nats:…)                        worker I of N (run --source nats:… --worker I/N)
//!  source ─► Broadcaster ─► publish: tenant, partition   partitions p with p mod N = I, each:
//!            (decoded events)  └► <prefix>.<tenant>.<p>   durable pull consumer ─► router partition
//!                                 Nats-Msg-Id, wait ack     (filters → EventCorrelator → sinks)
//!                                                          every snapshot interval: drain, state ─► object
//!                                                          <durable>-<p>, then ack all ≤ its sequence
//! ```
//!
//! **Publish** ([`publish`]): each decoded event goes, after tenant routing and before any
//! correlation, to `<prefix>.<tenant>.<p>` with p = the partition key hashed mod P (P fixed per
//! stream). At most `--max-in-flight` publications wait for JetStream's acknowledgement at once
//! (back-pressure); an event counts as finished (and, with `--delivery at-least-once`, moves
//! the saved source position) only once JetStream acknowledged it. A failed publication is
//! retried with the same `Nats-Msg-Id` until it is acknowledged or the run is cancelled. The id
//! is the event's `uid:resourceVersion` when it has both, else derived from the source position
//! (`<xxh3 of the source>:<file offset>:<ordinal among events at that offset>`), so a restarted
//! publisher re-reading from its saved position publishes nothing twice inside the stream's
//! duplicate window. Events of a source without positions (standard input, HTTP ingest) get
//! `e<epoch>:<sequence>`, the epoch random per process: a publication retried after a stream
//! leader change is recognised, and a restarted publisher's ids are its own. Every message
//! carries its id, whatever the source, and expects the stream's last sequence to be the one
//! the message before it got (`Nats-Expected-Last-Sequence`,
//! [`crate::pipeline::sequence_chain`]), so that none is stored before one sent earlier.
//!
//! **Work** ([`run_worker`]): worker I of N takes the partitions p with p mod N = I (static
//! assignment: a StatefulSet ordinal). Each partition has its own tenant-router partition
//! ([`crate::pipeline::router::record_partitions`]), fed in stream order, so every key's events meet one
//! EventCorrelator in publish order: per event name, the same sink calls as one `run` over the
//! same input (under no LRU pressure: each partition's caches hold `lru_cache_size` entries).
//!
//! **Snapshots**: every snapshot interval (and after [`SNAPSHOT_EVERY_EVENTS`] events, and at
//! shutdown) a partition stops taking messages, lets every write in flight end (every sink
//! acknowledged or gave up), takes its correlator state (with its open "N suppressed" windows;
//! at shutdown, after writing their summaries) and stores it in the object store
//! ([`crate::nats::Snapshots`]) with the last stream sequence it reflects; only then are the
//! messages up to that sequence acknowledged (all-up-to). A worker taking a partition (at start, after a crash, or a standby
//! whose pin came) restores the snapshot and skips the messages up to its sequence, so counts
//! continue exactly; messages after it were possibly written already and are written again:
//! duplicates are bounded by the snapshot interval. A snapshot of another format version, key
//! seed, partitioning or correlator options is refused with a message, counted, and the
//! partition starts fresh.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::broadcaster::Watcher;
use crate::correlator::PREPARE_BATCH_SIZE;
use crate::correlator::snapshot::{PartitionSnapshot, TenantSnapshot};
use crate::delivery::{Position, Progress, SeenVersions};
use crate::event::{Event, IngestHeaders, RecordedClock, SharedEvent};
use crate::nats::{NatsError, NatsTarget};
use crate::partition::PartitionKey;
use crate::pipeline::plan::TenantPlan;
use crate::pipeline::router::{PartitionInput, RouterOptions, RouterStats, record_partitions};
use crate::pipeline::sequence_chain::{Refusal, SUSPEND_FOR, SequenceChain, refused_last_sequence};
use crate::source::{SourceCounters, SourceStats};

/// The NATS header carrying an HTTP ingest request's header (`name: value`), one per header,
/// so that workers route tenants on headers as the publisher did.
pub const INGEST_HEADER: &str = "Eventpipe-Ingest-Header";

/// The NATS headers carrying a replay line's instants ([`crate::event::RecordedClock`], RFC 3339
/// with nanoseconds), so that workers correlate with the clocks a single host reads.
pub const CLOCK_HEADER: &str = "Eventpipe-Clock";
/// See [`CLOCK_HEADER`]: the line's `spam_filter_clock`, sent when it differs from its `clock`.
pub const SPAM_FILTER_CLOCK_HEADER: &str = "Eventpipe-Spam-Filter-Clock";

/// The NATS header carrying the event's enrichment (one line of JSON,
/// [`crate::event::enrichment::Enriched::to_header`]), attached by the publish tier where the
/// cluster is read, so that workers route (`match.object_labels`, …) and write it as a single
/// host does.
pub const ENRICHMENT_HEADER: &str = "Eventpipe-Enrichment";

/// A partition snapshots after this many events even before its interval passed, so that the
/// messages awaiting acknowledgement stay well below [`crate::nats::MAX_ACK_PENDING`].
pub const SNAPSHOT_EVERY_EVENTS: u64 = 20_000;

/// How long catching up on a partition's earlier messages may wait for the next ones before it
/// starts over.
pub const CATCH_UP_STALL: Duration = Duration::from_secs(5);

/// Messages a catch-up fetches at once.
pub const CATCH_UP_FETCH: usize = 1000;

/// Default `--snapshot-interval`.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(5);

/// Counters of a publisher or a worker, live (for `/metrics` and the summary).
#[derive(Debug, Default)]
pub struct ScaleCounters {
    published: AtomicU64,
    duplicates: AtomicU64,
    publish_retries: AtomicU64,
    snapshots: AtomicU64,
    snapshot_failures: AtomicU64,
    snapshots_restored: AtomicU64,
    snapshots_refused: AtomicU64,
    skipped_redelivered: AtomicU64,
    last_snapshot_bytes: AtomicU64,
    last_snapshot_micros: AtomicU64,
    /// A worker's partitions, plus one (0: not a worker, or not started).
    worker_partitions: AtomicU64,
}

/// What [`ScaleCounters`] hold, as the summary shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScaleStats {
    /// Events JetStream acknowledged (publisher).
    pub published: u64,
    /// Of those, how many JetStream recognised as duplicates by `Nats-Msg-Id`.
    pub duplicates: u64,
    /// Publications tried again after an error or a missing acknowledgement.
    pub publish_retries: u64,
    /// Correlator snapshots stored (worker, or a single host's state file).
    pub snapshots: u64,
    /// Snapshots that could not be stored (messages stay unacknowledged).
    pub snapshot_failures: u64,
    /// Partitions that started from a snapshot.
    pub snapshots_restored: u64,
    /// Snapshots refused (another version, seed, partitioning or correlator options): the
    /// partition started fresh.
    pub snapshots_refused: u64,
    /// Messages delivered again that a restored snapshot already reflected (skipped).
    pub skipped_redelivered: u64,
    /// Size of the last snapshot stored, bytes (deflated for the object store).
    pub last_snapshot_bytes: u64,
    /// Time the last snapshot took (drain, encode, store), microseconds.
    pub last_snapshot_micros: u64,
}

impl ScaleCounters {
    /// A worker started on `partitions` partitions (`eventpipe_nats_worker_partitions`).
    pub fn worker_started(&self, partitions: usize) {
        self.worker_partitions.store(partitions as u64 + 1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn stats(&self) -> ScaleStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ScaleStats {
            published: g(&self.published),
            duplicates: g(&self.duplicates),
            publish_retries: g(&self.publish_retries),
            snapshots: g(&self.snapshots),
            snapshot_failures: g(&self.snapshot_failures),
            snapshots_restored: g(&self.snapshots_restored),
            snapshots_refused: g(&self.snapshots_refused),
            skipped_redelivered: g(&self.skipped_redelivered),
            last_snapshot_bytes: g(&self.last_snapshot_bytes),
            last_snapshot_micros: g(&self.last_snapshot_micros),
        }
    }

    /// Counts a snapshot refused (also by a single host's state file).
    pub fn refused(&self) {
        self.snapshots_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a snapshot restored.
    pub fn restored(&self) {
        self.snapshots_restored.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a snapshot stored: its size and how long it took.
    pub fn stored(&self, bytes: usize, took: Duration) {
        self.snapshots.fetch_add(1, Ordering::Relaxed);
        self.last_snapshot_bytes.store(bytes as u64, Ordering::Relaxed);
        self.last_snapshot_micros.store(took.as_micros() as u64, Ordering::Relaxed);
    }
}

/// `run --worker I/N`: this worker's index and the number of workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerIndex {
    /// I (0-based, < N).
    pub index: u32,
    /// N (≥ 1).
    pub count: u32,
}

impl std::str::FromStr for WorkerIndex {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad =
            || format!("{s:?}: expected I/N with 0 <= I < N (e.g. 0/3), or a StatefulSet pod name NAME-I with /N");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        // `web-2/3`: a pod name's ordinal.
        let i = i.rsplit('-').next().unwrap_or(i);
        let (index, count) = (i.parse::<u32>().map_err(|_| bad())?, n.parse::<u32>().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

impl WorkerIndex {
    /// The partitions of P this worker takes: p mod N = I.
    pub fn partitions(self, partitions: u32) -> Vec<u32> {
        (0..partitions).filter(|p| p % self.count == self.index).collect()
    }
}

/// What a publisher needs besides its watcher.
pub struct PublishOptions {
    /// The stream and subjects.
    pub target: NatsTarget,
    /// JetStream.
    pub js: jetstream::Context,
    /// P.
    pub partitions: u32,
    /// What an event's partition is computed from (a tenant's `partition_key` overrides it).
    pub partition_key: PartitionKey,
    /// Publications awaiting acknowledgement at once (≥ 1).
    pub window: usize,
    /// The source's positions (message ids), if it records them.
    pub progress: Option<Arc<Progress>>,
    /// Whether the publisher takes finished positions itself (no at-least-once committer does).
    pub trim_progress: bool,
    /// Numbers events, acknowledged once published; live stats; cancellation.
    pub router: RouterOptions,
    /// Counters.
    pub counters: Arc<ScaleCounters>,
    /// The source's name (message ids).
    pub source: String,
    /// The stream's last sequence when the publisher started (`None`: unknown), the first
    /// publication's expectation ([`SequenceChain`]).
    pub last_sequence: Option<u64>,
}

/// A `Nats-Msg-Id` for `event`: `uid:resourceVersion` when it has both, else from its source
/// position (`ordinal`: events before it at the same position), else — a source without
/// positions: standard input, HTTP ingest — from this publisher's `epoch` (random per process)
/// and the event's sequence number in it (`seq`), so that a restarted publisher's ids never
/// collide with the last one's.
fn message_id(
    event: &Event,
    source: u64,
    position: Option<&Position>,
    ordinal: u32,
    (epoch, seq): (u64, u64),
) -> String {
    let m = &event.metadata;
    if !m.uid.is_empty() && !m.resource_version.is_empty() {
        return format!("{}:{}", m.uid, m.resource_version);
    }
    match position {
        Some(Position::FileOffset(offset)) => format!("{source:016x}:{offset}:{ordinal}"),
        Some(Position::ResourceVersion(rv)) => format!("{source:016x}:rv{rv}:{ordinal}"),
        None => format!("e{epoch:016x}:{seq}"),
    }
}

/// One event being published: what a re-publication needs, and the acknowledgement awaited.
struct Publication {
    seq: u64,
    subject: String,
    id: String,
    /// The `Nats-Expected-Last-Sequence` it was last sent with ([`SequenceChain`]).
    expected: Option<u64>,
    headers: crate::event::IngestHeaders,
    clock: crate::event::RecordedClock,
    /// [`ENRICHMENT_HEADER`]'s value.
    enrichment: Option<String>,
    payload: Bytes,
    ack: Option<AckFuture>,
}

type AckFuture = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<jetstream::publish::PublishAck, jetstream::context::PublishError>>
            + Send,
    >,
>;

impl Publication {
    /// Hands the message to the client (in call order: the stream's order), expecting the
    /// stream's last sequence to be `expected` (if any), keeping the acknowledgement to await.
    async fn send(&mut self, js: &jetstream::Context, expected: Option<u64>) -> Result<(), String> {
        let mut message =
            jetstream::message::PublishMessage::build().payload(self.payload.clone()).message_id(&self.id);
        self.expected = expected;
        if let Some(last) = expected {
            message = message.expected_last_sequence(last);
        }
        for (name, value) in self.headers.get().into_iter().flatten() {
            message = message.header(INGEST_HEADER, format!("{name}: {value}").as_str());
        }
        if let Some(clock) = self.clock.clock() {
            let text = |t: crate::event::Time| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
            message = message.header(CLOCK_HEADER, text(clock).as_str());
            if let Some(spam) = self.clock.spam_filter_clock().filter(|s| *s != clock) {
                message = message.header(SPAM_FILTER_CLOCK_HEADER, text(spam).as_str());
            }
        }
        if let Some(enrichment) = &self.enrichment {
            message = message.header(ENRICHMENT_HEADER, enrichment.as_str());
        }
        let ack = js.send_publish(self.subject.clone(), message).await.map_err(|e| e.to_string())?;
        self.ack = Some(std::future::IntoFuture::into_future(ack));
        Ok(())
    }
}

/// The publish tier's watcher: every event of the Broadcaster to its subject, in Broadcaster
/// order, waiting for JetStream's acknowledgements ([module docs](self)). Up to `window`
/// publications await their acknowledgement at once; they are handed to the client in order,
/// and when one fails, it and every one after it are handed over again, in order, after a pause
/// (doubling from 100 ms to 5 s) — those already stored are recognised by their `Nats-Msg-Id`.
/// Each publication expects the stream's last sequence to be the one the publication before it
/// got ([`SequenceChain`]), so none is stored before one sent earlier (a publication lost while
/// the stream's leader changes, or with the server the client was connected to, makes the rest
/// of the window refused; a refusal sends the window again at once, from the sequence it
/// reports): each partition's messages keep the source's order.
/// Returns the stats (received and finished; publication counts are in [`ScaleCounters`]) when
/// the watcher closes and every publication ended (acknowledged, or cancelled by a shutdown).
pub async fn publish(
    mut watcher: Watcher<SharedEvent>,
    mut plans: watch::Receiver<Arc<TenantPlan>>,
    o: PublishOptions,
) -> RouterStats {
    let source_hash = xxhash_rust::xxh3::xxh3_64(o.source.as_bytes());
    // The ids of events without a position (stdin, HTTP ingest) are this process's own.
    let epoch: u64 = rand::random();
    let mut pending: std::collections::VecDeque<Publication> = std::collections::VecDeque::new();
    let mut last_position: Option<Position> = None;
    let mut ordinal = 0u32;
    let mut chain = SequenceChain::new(o.last_sequence);
    let mut trim = SeenVersions::with_capacity(1);
    let acks = o.router.acks.clone();
    let cancel = o.router.cancel.clone();
    let mut stats = RouterStats::default();
    let mut ended = false;
    // Set after a failure: hand every pending publication over again, in order.
    let mut resend = false;
    let mut pause = Duration::from_millis(100);
    // A refusal of the order check: the window is sent again without a pause.
    let mut rebased = false;
    loop {
        if resend {
            if !rebased {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            (resend, rebased) = (false, false);
            let now = Instant::now();
            for (index, p) in pending.iter_mut().enumerate() {
                o.counters.publish_retries.fetch_add(1, Ordering::Relaxed);
                if let Err(error) = p.send(&o.js, chain.expectation(index, now)).await {
                    tracing::warn!(subject = p.subject, %error, "publishing to JetStream failed; trying again");
                    resend = true;
                    break;
                }
            }
            continue;
        }
        if ended && pending.is_empty() {
            break;
        }
        let front_sent = pending.front().is_some_and(|p| p.ack.is_some());
        let room = !ended && pending.len() < o.window;
        tokio::select! {
            biased;
            acked = async { pending.front_mut().and_then(|p| p.ack.as_mut()).expect("sent").await }, if front_sent => {
                match acked {
                    Ok(ack) => {
                        let p = pending.pop_front().expect("the front was acknowledged");
                        chain.acknowledged(ack.sequence);
                        pause = Duration::from_millis(100);
                        o.counters.published.fetch_add(1, Ordering::Relaxed);
                        o.counters.duplicates.fetch_add(u64::from(ack.duplicate), Ordering::Relaxed);
                        stats.finished += 1;
                        acks.ack(p.seq);
                    }
                    Err(error) => {
                        resend = true;
                        rebased = rebase_on_refusal(&error.to_string(), pending.front(), &mut chain);
                    }
                }
            }
            batch = watcher.recv_batch(PREPARE_BATCH_SIZE), if room => {
                let Some(batch) = batch else {
                    ended = true;
                    continue;
                };
                let plan = plans.borrow_and_update().clone();
                let now = Instant::now();
                for event in batch {
                    let seq = acks.begin();
                    stats.total.received += 1;
                    let tenant = &plan.tenants[plan.route(&event)].name;
                    let partition = plan.partition(&event, o.partition_key, o.partitions as usize) as u32;
                    let position = o.progress.as_ref().and_then(|p| p.position_of(seq));
                    ordinal = if position.is_some() && position == last_position { ordinal + 1 } else { 0 };
                    let id = message_id(&event, source_hash, position.as_ref(), ordinal, (epoch, seq));
                    last_position = position;
                    let mut p = Publication {
                        seq,
                        subject: o.target.subject(tenant, partition),
                        id,
                        expected: None,
                        headers: event.ingest_headers.clone(),
                        clock: event.recorded_clock.clone(),
                        enrichment: event.enrichment.to_header(),
                        payload: Bytes::from(serde_json::to_vec(&*event).expect("an event serialises")),
                        ack: None,
                    };
                    let expected = chain.expectation(pending.len(), now);
                    if !resend && let Err(error) = p.send(&o.js, expected).await {
                        tracing::warn!(subject = p.subject, %error, "publishing to JetStream failed; trying again");
                        resend = true;
                    }
                    pending.push_back(p);
                }
            }
            _ = cancel.cancelled(), if resend => break,
        }
        if o.trim_progress
            && let Some(progress) = &o.progress
        {
            progress.take_finished(&mut trim);
        }
        let delta = std::mem::take(&mut stats);
        o.router.stats.lock().unwrap_or_else(|p| p.into_inner()).add(&delta);
    }
    // Cancelled: what was not acknowledged is not finished (at-least-once sends it again).
    stats.total.cancelled += pending.len() as u64;
    o.router.stats.lock().unwrap_or_else(|p| p.into_inner()).add(&stats);
    o.router.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Takes a failed acknowledgement of `front`: a refusal of the order check moves `chain` to the
/// sequence it reports and returns true (the window is sent again at once); any other failure
/// is logged and returns false (the window is sent again after a pause).
fn rebase_on_refusal(error: &str, front: Option<&Publication>, chain: &mut SequenceChain) -> bool {
    let Some((expected, actual)) = front.and_then(|p| p.expected).zip(refused_last_sequence(error)) else {
        tracing::warn!(subject = front.map(|p| p.subject.as_str()), %error, "no acknowledgement from JetStream; publishing again");
        return false;
    };
    match chain.refused(expected, actual, Instant::now()) {
        Refusal::Behind | Refusal::Foreign => {
            tracing::debug!(
                expected,
                actual,
                "the stream's last sequence is not the one predicted; publishing the window again"
            );
        }
        Refusal::Suspended => tracing::warn!(
            expected,
            actual,
            "another publisher writes to the stream: publications are not checked for order for {} s",
            SUSPEND_FOR.as_secs()
        ),
    }
    true
}

/// What a worker needs.
pub struct WorkerOptions {
    /// The stream, consumers and bucket.
    pub target: NatsTarget,
    /// This worker's index among the workers.
    pub worker: WorkerIndex,
    /// How often each partition snapshots its correlator state (also after
    /// [`SNAPSHOT_EVERY_EVENTS`] events, and at shutdown).
    pub snapshot_interval: Duration,
    /// The router partitions' options (retry policy, window, delivery, live stats; `workers`
    /// and `partition_key` are not used).
    pub router: RouterOptions,
    /// Events fed (`read`) and messages that did not decode (`bad_lines`).
    pub counters: Arc<SourceCounters>,
    /// Snapshot counters.
    pub scale: Arc<ScaleCounters>,
}

/// A worker connected to its stream: made before the tenant plan, so that the process adopts
/// the stream's key seed before any key is hashed ([`crate::correlator::keys::adopt_key_seed`]).
pub struct Connected {
    target: NatsTarget,
    stream: jetstream::stream::Stream,
    snapshots: crate::nats::Snapshots,
    partitions: u32,
    pinned: bool,
}

impl Connected {
    /// Connects, finds (or makes) the stream and the bucket, and adopts the key seed.
    ///
    /// # Errors
    /// [`NatsError`] when the server, stream or bucket cannot be reached, or the process hashed
    /// keys under another seed already.
    pub async fn connect(target: &NatsTarget) -> Result<Self, NatsError> {
        let client = target.connect().await?;
        let version = client.server_info().version;
        let pinned = target.pinned && crate::nats::has_priority_groups(&version);
        let js = jetstream::new(client);
        let (stream, partitions) = target.stream(&js, true).await?;
        let bucket = target.bucket(&js).await?;
        let seed = target.key_seed(&bucket, rand::random()).await?;
        let snapshots = target.snapshots(&js, bucket).await?;
        if !crate::correlator::keys::adopt_key_seed(seed) {
            return Err(NatsError {
                target: target.to_string(),
                doing: "adopting the key seed",
                message: "keys were already hashed under another seed in this process".into(),
            });
        }
        Ok(Self { target: target.clone(), stream, snapshots, partitions, pinned })
    }

    /// P.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Whether consumers use pinned clients (the server has priority groups).
    pub fn pinned(&self) -> bool {
        self.pinned
    }
}

/// The worker tier: consumes this worker's partitions until `shutdown`, each through its own
/// router partition, snapshotting and acknowledging as the [module docs](self) say. Returns
/// the source side's stats once every partition drained (its last snapshot stored).
pub async fn run_worker(
    connected: Connected,
    plans: watch::Receiver<Arc<TenantPlan>>,
    o: WorkerOptions,
    shutdown: CancellationToken,
) -> SourceStats {
    let mine = o.worker.partitions(connected.partitions);
    o.scale.worker_started(mine.len());
    let connected = Arc::new(connected);
    let mut inputs = Vec::with_capacity(mine.len());
    let mut feeders = Vec::with_capacity(mine.len());
    let o = Arc::new(o);
    for &p in &mine {
        let (tx, rx) = mpsc::channel::<PartitionInput>(4);
        inputs.push(rx);
        feeders.push(tokio::spawn(feed_partition(connected.clone(), p, tx, o.clone(), shutdown.clone())));
    }
    let router = tokio::spawn(record_partitions(inputs, plans, o.router.clone()));
    for feeder in feeders {
        if let Err(error) = feeder.await {
            tracing::error!(%error, "a partition's consumer failed");
        }
    }
    let _ = router.await;
    o.counters.stats()
}

/// One partition: restore, consume in stream order, snapshot and acknowledge.
async fn feed_partition(
    c: Arc<Connected>,
    p: u32,
    tx: mpsc::Sender<PartitionInput>,
    o: Arc<WorkerOptions>,
    shutdown: CancellationToken,
) {
    let key = crate::nats::snapshot_key(&c.target.durable, p);
    // The last stream sequence the partition's state reflects.
    let Some(mut reflected) = restore(&c, p, &key, &tx, &o.scale, &shutdown).await else { return };
    let mut snapshotted = reflected;
    let Some(consumer) = partition_consumer(&c, p, &shutdown).await else { return };
    announce(&format!(
        "worker {}/{}: partition {p} of {} from sequence {} ({})",
        o.worker.index,
        o.worker.count,
        c.partitions,
        reflected + 1,
        if c.pinned { "pinned client" } else { "static assignment" }
    ));
    // The acknowledgement of the last message fed (all-up-to acknowledges everything before).
    let mut last_acker: Option<jetstream::message::Acker> = None;
    // Whether the messages an earlier holder of the partition was delivered were caught up on.
    let mut caught_up = false;
    // A pin held by a client that no longer pulls (a worker killed) is taken at once.
    if c.pinned && unpin_if_stranded(&c, p, PinCheck::Idle).await.is_some_and(|unacknowledged| unacknowledged > 0) {
        let Some(_) = feed_catch_up(&c, p, &mut reflected, &o, &tx, &shutdown).await else { return };
        caught_up = true;
    }
    // The consumer sequence (delivery number) of the last message this worker received: a
    // message numbered past the next one means deliveries went to a pull request this worker
    // no longer reads (a pull stream dropped when pulling anew, e.g. after an unpin) and are
    // read again from the stream before it ([`needs_catch_up`]).
    let mut last_delivery: Option<u64> = None;
    let mut since_snapshot = 0u64;
    let mut tick = tokio::time::interval(o.snapshot_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    // A pull stream keeps its pin as long as it pulls: its pulls expire well within the
    // priority timeout, and it is made anew only when it ends (a new one starts on standby).
    let expires = (c.target.priority_timeout / 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
    // When the last message came (or the partition was taken, or last unpinned).
    let mut last_message = Instant::now();
    'pull: while !shutdown.is_cancelled() {
        let builder =
            consumer.stream().max_messages_per_batch(PREPARE_BATCH_SIZE).expires(expires).heartbeat(expires / 4);
        let builder = if c.pinned { builder.group(crate::nats::PRIORITY_GROUP) } else { builder };
        let mut messages = match builder.messages().await {
            Ok(m) => m,
            Err(error) => {
                tracing::warn!(partition = p, %error, "cannot pull; trying again");
                tokio::select! {
                    _ = shutdown.cancelled() => break 'pull,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue 'pull,
                }
            }
        };
        loop {
            let mut batch: Vec<(u64, SharedEvent)> = Vec::new();
            let mut ticked = false;
            tokio::select! {
                _ = shutdown.cancelled() => break 'pull,
                _ = tick.tick() => ticked = true,
                message = messages.next() => {
                    let mut message = match message {
                        Some(Ok(m)) => Some(m),
                        // A missed heartbeat or a lost connection: the stream pulls again by
                        // itself (and keeps its pin).
                        Some(Err(error)) => {
                            tracing::debug!(partition = p, %error, "pulling messages");
                            None
                        }
                        None => continue 'pull,
                    };
                    // This message and whatever else is already here, up to a batch.
                    if message.is_some() {
                        last_message = Instant::now();
                    }
                    while let Some(m) = message.take() {
                        // Taking the partition (its first message here): what the consumer
                        // delivered before, to a worker now gone, is read again in stream order
                        // first — waiting for its redelivery would put it after newer messages.
                        // Likewise when deliveries were skipped: they went to a pull request of
                        // this worker's that it no longer reads (and all-up-to acknowledgements
                        // of later messages would acknowledge them unread).
                        if needs_catch_up(&m, caught_up, &mut last_delivery, p) {
                            if !catch_up_until_done(&c, p, &mut reflected, &mut batch, &o, &shutdown).await {
                                break 'pull;
                            }
                            caught_up = true;
                        }
                        take(m, &mut reflected, &mut last_acker, &mut batch, &o, p).await;
                        if batch.len() < PREPARE_BATCH_SIZE
                            && let Some(Some(Ok(next))) = futures_util::FutureExt::now_or_never(messages.next())
                        {
                            message = Some(next);
                        }
                    }
                }
            }
            if !batch.is_empty() {
                since_snapshot += batch.len() as u64;
                o.counters.add_read(batch.len() as u64);
                if tx.send(PartitionInput::Batch(batch)).await.is_err() {
                    break 'pull;
                }
            }
            if ticked && c.pinned && last_message.elapsed() >= PIN_STALL_FACTOR * c.target.priority_timeout {
                last_message = Instant::now();
                if let Some(unacknowledged) = unpin_if_stranded(&c, p, PinCheck::Stalled).await {
                    if unacknowledged > 0 {
                        let Some(fed) = feed_catch_up(&c, p, &mut reflected, &o, &tx, &shutdown).await else {
                            break 'pull;
                        };
                        caught_up = true;
                        since_snapshot += fed;
                    }
                    continue 'pull;
                }
            }
            let due = ticked || since_snapshot >= SNAPSHOT_EVERY_EVENTS || tick_due(&mut tick);
            if due && reflected > snapshotted {
                let started = Instant::now();
                let stored = snapshot(&c, p, &key, &tx, reflected, &o.scale, PartitionInput::Snapshot).await;
                // Nothing was read while the snapshot was stored (up to STATE_RETRY_FOR while the
                // cluster elects a leader): that is no time "without a message", which would
                // take a pin as stranded and pull anew while messages wait in this pull stream.
                last_message += started.elapsed();
                if stored {
                    snapshotted = reflected;
                    since_snapshot = 0;
                    acknowledge(&mut last_acker, p).await;
                }
            }
        }
    }
    // Shutdown: what was fed is drained, the open "N suppressed" windows are written,
    // snapshotted and acknowledged (unless the run's shutdown timeout ends the process first:
    // then it is delivered again).
    let stored = snapshot(&c, p, &key, &tx, reflected, &o.scale, PartitionInput::Finish).await;
    if stored && reflected > snapshotted {
        acknowledge(&mut last_acker, p).await;
    }
}

/// Partition `p`'s durable consumer, made (or found) again every second until it is; `None`
/// when `shutdown` came first.
async fn partition_consumer(
    c: &Connected,
    p: u32,
    shutdown: &CancellationToken,
) -> Option<jetstream::consumer::Consumer<jetstream::consumer::pull::Config>> {
    loop {
        match c.target.consumer(&c.stream, p, c.pinned).await {
            Ok(consumer) => return Some(consumer),
            Err(error) => {
                tracing::warn!(partition = p, %error, "cannot make the partition's consumer; trying again");
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Whether `message` (of partition `p`) must wait for a [`catch_up`]: the partition's first
/// message here (`caught_up` false), or one whose consumer sequence skips deliveries since the
/// last message received (`last_delivery`, updated). A delivery this worker never read — to a
/// pull stream since dropped (pulling anew after an unpin, an error or the end of a pull
/// stream): messages it had received but not yielded, or its pull requests the server still
/// answered — would otherwise be passed over for good: later messages move the reflected sequence past it, so
/// that its redelivery is skipped, and their all-up-to acknowledgement acknowledges it. A
/// consumer sequence that does not go up (a new consumer leader delivering again) skips none.
fn needs_catch_up(message: &jetstream::Message, caught_up: bool, last_delivery: &mut Option<u64>, p: u32) -> bool {
    let delivery = message.info().ok().map(|i| i.consumer_sequence);
    let skipped = match (*last_delivery, delivery) {
        (Some(last), Some(delivery)) if delivery > last + 1 => delivery - last - 1,
        _ => 0,
    };
    if delivery.is_some() {
        *last_delivery = delivery;
    }
    if skipped > 0 && caught_up {
        tracing::warn!(
            partition = p,
            skipped,
            "deliveries went to a pull request no longer read: reading them again from the stream"
        );
    }
    !caught_up || skipped > 0
}

/// A pinned partition that got no message for this many priority timeouts checks whether
/// messages wait for it ([`unpin_if_stranded`]).
const PIN_STALL_FACTOR: u32 = 2;

/// When [`unpin_if_stranded`] takes a consumer's pin as stranded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PinCheck {
    /// This worker, pulling, got no message for [`PIN_STALL_FACTOR`] priority timeouts.
    Stalled,
    /// Before this worker's first pull: no pull request waits (a live pinned worker always has
    /// one waiting; a killed one's expired), whether a client is still pinned or not (a consumer
    /// whose leader was elected anew may have lost the pin).
    Idle,
}

/// Partition `p`'s messages wait (pending, or delivered and unacknowledged) and the consumer's
/// pin is stranded as `check` says: pinned to a client that no longer pulls and whose pin did
/// not lapse (seen after the node leading the consumer died while a worker was replaced: the
/// new consumer leader kept the dead worker's pin), or, at a partition's start, held by no
/// client that pulls. Unpins the consumer's group if a client is pinned, so that the next pull
/// is pinned; returns the messages delivered and unacknowledged when the pin was stranded (the
/// caller reads them from the stream, as they would come again only after `ack_wait`, and
/// pulls anew, without a stale pin id).
async fn unpin_if_stranded(c: &Connected, p: u32, check: PinCheck) -> Option<usize> {
    let name = format!("{}-{p}", c.target.durable);
    let info = match c.stream.consumer_info(&name).await {
        Ok(info) => info,
        Err(error) => {
            tracing::debug!(partition = p, %error, "reading the partition's consumer");
            return None;
        }
    };
    if info.num_pending == 0 && info.num_ack_pending == 0 {
        return None;
    }
    if check == PinCheck::Idle && info.num_waiting > 0 {
        return None;
    }
    let pinned =
        info.priority_groups.iter().any(|g| g.group == crate::nats::PRIORITY_GROUP && g.pinned_client_id.is_some());
    if !pinned {
        // Nothing to unpin: the next pull is pinned. What was delivered to the client that held
        // the partition is caught up on.
        return Some(info.num_ack_pending);
    }
    match c.stream.unpin_consumer(&name, crate::nats::PRIORITY_GROUP).await {
        Ok(()) => {
            tracing::warn!(
                partition = p,
                pending = info.num_pending,
                unacknowledged = info.num_ack_pending,
                "messages wait but the consumer is pinned to a client that does not pull: unpinned it"
            );
            Some(info.num_ack_pending)
        }
        Err(error) => {
            tracing::warn!(partition = p, %error, "messages wait but none came; unpinning the consumer failed");
            None
        }
    }
}

/// After a stranded pin was taken ([`unpin_if_stranded`]): what its holder was delivered, which
/// would come again only after `ack_wait`, is read from the stream ([`catch_up_until_done`])
/// and fed to the router partition now; returns how many events were fed, `None` when
/// `shutdown` came first or the partition is gone.
async fn feed_catch_up(
    c: &Connected,
    p: u32,
    reflected: &mut u64,
    o: &WorkerOptions,
    tx: &mpsc::Sender<PartitionInput>,
    shutdown: &CancellationToken,
) -> Option<u64> {
    let mut batch = Vec::new();
    if !catch_up_until_done(c, p, reflected, &mut batch, o, shutdown).await {
        return None;
    }
    let fed = batch.len() as u64;
    o.counters.add_read(fed);
    if fed > 0 && tx.send(PartitionInput::Batch(batch)).await.is_err() {
        return None;
    }
    Some(fed)
}

/// [`catch_up`], tried again every 500 ms until it succeeds; `false` when `shutdown` came first.
async fn catch_up_until_done(
    c: &Connected,
    p: u32,
    reflected: &mut u64,
    batch: &mut Vec<(u64, SharedEvent)>,
    o: &WorkerOptions,
    shutdown: &CancellationToken,
) -> bool {
    while let Err(error) = catch_up(c, p, reflected, batch, o).await {
        tracing::warn!(partition = p, %error, "cannot read the partition's earlier messages; trying again");
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    true
}

/// Whether the snapshot tick has fired (without waiting).
fn tick_due(tick: &mut tokio::time::Interval) -> bool {
    futures_util::FutureExt::now_or_never(tick.tick()).is_some()
}

/// Takes one message: skips one a restored snapshot already reflects (acknowledging it),
/// decodes the rest into `batch`.
async fn take(
    message: jetstream::Message,
    reflected: &mut u64,
    last_acker: &mut Option<jetstream::message::Acker>,
    batch: &mut Vec<(u64, SharedEvent)>,
    o: &WorkerOptions,
    p: u32,
) {
    let Ok(sequence) = message.info().map(|i| i.stream_sequence) else { return };
    let (message, acker) = message.split();
    if sequence <= *reflected {
        // Delivered again, and already in the state (a restored snapshot, or a redelivery
        // after the acknowledgement wait while this worker holds it).
        o.scale.skipped_redelivered.fetch_add(1, Ordering::Relaxed);
        if last_acker.is_none() {
            let _ = acker.ack().await;
        }
        return;
    }
    *reflected = sequence;
    *last_acker = Some(acker);
    decode_into(&message, batch, o, p);
}

/// Reads the partition's messages after `reflected` up to the last one its durable consumer
/// delivered (to this worker or to one now gone), in stream order, into `batch`; `reflected`
/// becomes that sequence (on an error, `reflected` and `batch` are left as they were). The
/// durable consumer's redeliveries of them are then skipped ([`take`]). Read through an
/// ephemeral pull consumer of its own ([`NatsTarget::reader`]) in fetches
/// of up to [`CATCH_UP_FETCH`] messages: when messages are pending and none comes for
/// [`CATCH_UP_STALL`] (a cluster electing a leader), it is an error, and the caller starts over.
async fn catch_up(
    c: &Connected,
    p: u32,
    reflected: &mut u64,
    batch: &mut Vec<(u64, SharedEvent)>,
    o: &WorkerOptions,
) -> Result<(), String> {
    let name = format!("{}-{p}", c.target.durable);
    let info = c.stream.consumer_info(&name).await.map_err(|e| e.to_string())?;
    let delivered = info.delivered.stream_sequence;
    if delivered <= *reflected {
        return Ok(());
    }
    let reader = c.target.reader(&c.stream, p, *reflected + 1).await.map_err(|e| e.to_string())?;
    let (from, mut at, mut read) = (*reflected, *reflected, Vec::new());
    // `delivered` may lie past the partition's last message (the server moves it over other
    // partitions' messages): the end is a message past it, or none left to read.
    let mut reader = reader;
    let result = async {
        let mut progress = Instant::now();
        'read: loop {
            let mut messages =
                reader.fetch().max_messages(CATCH_UP_FETCH).messages().await.map_err(|e| e.to_string())?;
            let mut got = false;
            // A fetch answers nothing when the node of the reader dies meanwhile (a cluster
            // losing a node), and the client does not time a fetch out: without a bound, the
            // partition would wait for it for ever, reading nothing more.
            while let Some(message) = tokio::time::timeout(CATCH_UP_STALL, messages.next())
                .await
                .map_err(|_| format!("a fetch answered nothing for {CATCH_UP_STALL:?} after sequence {at}"))?
            {
                let message = message.map_err(|e| e.to_string())?;
                let Ok(sequence) = message.info().map(|i| i.stream_sequence) else { continue };
                got = true;
                if sequence > delivered {
                    break 'read;
                }
                if sequence > at {
                    at = sequence;
                    decode_into(&message.message, &mut read, o, p);
                }
            }
            if got {
                progress = Instant::now();
            } else if reader.info().await.map_err(|e| e.to_string())?.num_pending == 0 {
                break;
            } else if progress.elapsed() > CATCH_UP_STALL {
                return Err(format!("no message for {CATCH_UP_STALL:?} after sequence {at}, {delivered} delivered"));
            } else {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }
    .await;
    let _ = c.stream.delete_consumer(&reader.cached_info().name).await;
    result?;
    *reflected = at;
    batch.append(&mut read);
    if at > from {
        tracing::info!(partition = p, from = from + 1, to = at, "caught up on messages delivered before");
    }
    Ok(())
}

/// Decodes a message's event (with its ingest headers) into `batch`, numbered; a message that is
/// not an event is counted and skipped.
fn decode_into(message: &async_nats::Message, batch: &mut Vec<(u64, SharedEvent)>, o: &WorkerOptions, p: u32) {
    match serde_json::from_slice::<Event>(&message.payload) {
        Ok(mut event) => {
            let headers: Vec<(String, String)> = message
                .headers
                .iter()
                .flat_map(|h| h.get_all(INGEST_HEADER))
                .filter_map(|v| v.as_str().split_once(": ").map(|(n, v)| (n.to_string(), v.to_string())))
                .collect();
            if !headers.is_empty() {
                event.ingest_headers = IngestHeaders::new(headers.into());
            }
            let instant = |name: &str| {
                let value = message.headers.as_ref()?.get(name)?;
                let at = chrono::DateTime::parse_from_rfc3339(value.as_str()).ok()?;
                Some(at.with_timezone(&chrono::Utc))
            };
            event.recorded_clock = RecordedClock::new(instant(CLOCK_HEADER), instant(SPAM_FILTER_CLOCK_HEADER));
            if let Some(text) = message.headers.as_ref().and_then(|h| h.get(ENRICHMENT_HEADER)) {
                match crate::event::enrichment::Enriched::from_header(text.as_str()) {
                    Ok(enrichment) => event.enrichment = enrichment,
                    Err(error) => {
                        tracing::warn!(partition = p, %error, "an enrichment header that is not one, ignored")
                    }
                }
            }
            batch.push((o.router.acks.begin(), crate::event::shared(event)));
        }
        Err(error) => {
            o.counters.add_bad_line();
            tracing::warn!(partition = p, %error, "a message that is not an event, skipped");
        }
    }
}

/// Acknowledges every message up to the last one fed.
async fn acknowledge(last_acker: &mut Option<jetstream::message::Acker>, p: u32) {
    if let Some(acker) = last_acker.take()
        && let Err(error) = acker.ack().await
    {
        tracing::warn!(partition = p, %error, "acknowledging failed (the messages will be delivered again)");
    }
}

/// Restores partition `p`'s snapshot from the bucket into its router partition; returns the
/// sequence it reflects (0: none, or refused: fresh), or `None` when `shutdown` came first. A
/// read that fails (other than "not found") is tried again every second until it succeeds:
/// starting fresh on a transient error (a cluster electing leaders) would change counts.
async fn restore(
    c: &Connected,
    p: u32,
    key: &str,
    tx: &mpsc::Sender<PartitionInput>,
    counters: &ScaleCounters,
    shutdown: &CancellationToken,
) -> Option<u64> {
    let bytes = loop {
        match c.snapshots.get(key).await {
            Ok(Some(bytes)) => break bytes,
            Ok(None) => return Some(0),
            Err(error) => {
                tracing::warn!(partition = p, %error, "cannot read the partition's snapshot yet; trying again");
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    };
    let decoded = crate::nats::unpack(&bytes)
        .map_err(|e| crate::correlator::snapshot::SnapshotRefused::Corrupt(e.to_string()))
        .and_then(|raw| PartitionSnapshot::decode(&raw))
        .and_then(|s| s.check(p, c.partitions).map(|()| s));
    let refused = |why: &dyn std::fmt::Display| {
        counters.refused();
        announce(&format!("correlator snapshot of partition {p} refused, starting fresh: {why}"));
        Some(0)
    };
    let snapshot = match decoded {
        Ok(s) => s,
        Err(why) => return refused(&why),
    };
    let (answer, restored) = oneshot::channel();
    if tx.send(PartitionInput::Restore(snapshot.tenants, answer)).await.is_err() {
        return Some(0);
    }
    match restored.await {
        Ok(Ok(())) => {
            counters.restored();
            Some(snapshot.sequence)
        }
        Ok(Err(why)) => refused(&why),
        Err(_) => Some(0),
    }
}

/// Has the router partition drain and hand over its state (`ask`: [`PartitionInput::Snapshot`],
/// or [`PartitionInput::Finish`] at shutdown), and stores it as reflecting `sequence`; returns
/// whether it was stored.
async fn snapshot(
    c: &Connected,
    p: u32,
    key: &str,
    tx: &mpsc::Sender<PartitionInput>,
    sequence: u64,
    counters: &ScaleCounters,
    ask: fn(oneshot::Sender<Vec<TenantSnapshot>>) -> PartitionInput,
) -> bool {
    let started = Instant::now();
    let (answer, state) = oneshot::channel();
    if tx.send(ask(answer)).await.is_err() {
        return false;
    }
    let Ok(tenants) = state.await else { return false };
    let snapshot = PartitionSnapshot {
        key_seed: crate::correlator::keys::key_seed(),
        partition: p,
        partitions: c.partitions,
        sequence,
        taken_at_ms: chrono::Utc::now().timestamp_millis(),
        tenants,
    };
    let packed = crate::nats::pack(&snapshot.encode());
    let size = packed.len();
    match c.snapshots.put(key, &packed).await {
        Ok(_) => {
            counters.stored(size, started.elapsed());
            tracing::debug!(partition = p, sequence, bytes = size, "correlator snapshot stored");
            true
        }
        Err(error) => {
            counters.snapshot_failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(partition = p, sequence, bytes = size, %error, "cannot store the correlator snapshot (messages stay unacknowledged)");
            false
        }
    }
}

/// Prints a line about the scale-out (stderr, always) and logs it.
fn announce(line: &str) {
    eprintln!("eventpipe: {line}");
    tracing::info!("{line}");
}

/// The live stats of a run, shared (a publisher's and a worker's partitions count into it).
pub type LiveStats = Arc<Mutex<RouterStats>>;

impl crate::metrics::Snapshot {
    /// Sets the partitions a worker consumes (`eventpipe_nats_worker_partitions`; nothing when
    /// the run is not a worker).
    pub fn add_worker_partitions(&mut self, counters: &ScaleCounters) {
        if let Some(n) = counters.worker_partitions.load(Ordering::Relaxed).checked_sub(1) {
            self.set(&crate::metrics::NATS_WORKER_PARTITIONS, &[], n);
        }
    }

    /// Adds the scale-out counters: snapshots per outcome, the publish tier's publications,
    /// duplicates and retries.
    pub fn add_scale(&mut self, s: &ScaleStats) {
        use crate::metrics::{NATS_DUPLICATES, NATS_PUBLISH_RETRIES, NATS_PUBLISHED, SNAPSHOTS};
        for (outcome, n) in [
            ("stored", s.snapshots),
            ("restored", s.snapshots_restored),
            ("refused", s.snapshots_refused),
            ("failed", s.snapshot_failures),
        ] {
            self.add(&SNAPSHOTS, &[("outcome", outcome)], n);
        }
        self.add(&NATS_PUBLISHED, &[], s.published);
        self.add(&NATS_DUPLICATES, &[], s.duplicates);
        self.add(&NATS_PUBLISH_RETRIES, &[], s.publish_retries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_worker_exposes_its_partitions_even_when_it_has_none() {
        let counters = ScaleCounters::default();
        let mut snapshot = crate::metrics::Snapshot::default();
        snapshot.add_worker_partitions(&counters);
        assert_eq!(snapshot.get(&crate::metrics::NATS_WORKER_PARTITIONS, &[]), None);
        // Four workers on three partitions: the fourth has none.
        let fourth: WorkerIndex = "3/4".parse().unwrap();
        counters.worker_started(fourth.partitions(3).len());
        snapshot.add_worker_partitions(&counters);
        assert_eq!(snapshot.get(&crate::metrics::NATS_WORKER_PARTITIONS, &[]), Some(0));
        let metrics = crate::metrics::Metrics::new();
        let counters = std::sync::Arc::new(counters);
        metrics.add_source(move |s| s.add_worker_partitions(&counters));
        let text = metrics.encode().unwrap();
        assert!(text.contains("# TYPE eventpipe_nats_worker_partitions gauge"), "{text}");
        assert!(text.contains("\neventpipe_nats_worker_partitions{} 0\n"), "{text}");
    }

    #[test]
    fn worker_indexes_take_every_partition_once() {
        let w: Vec<WorkerIndex> = ["0/3", "1/3", "eventpipe-worker-2/3"].iter().map(|s| s.parse().unwrap()).collect();
        let mut all: Vec<u32> = w.iter().flat_map(|w| w.partitions(16)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..16).collect::<Vec<_>>());
        assert_eq!(w[1].partitions(8), [1, 4, 7]);
        for bad in ["3/3", "1", "a/2", "0/0"] {
            assert!(bad.parse::<WorkerIndex>().is_err(), "{bad}");
        }
    }

    #[test]
    fn message_ids_come_from_uid_and_version_else_the_position_else_the_epoch_and_sequence() {
        let mut e = Event::default();
        assert_eq!(message_id(&e, 1, None, 0, (0xab, 9)), "e00000000000000ab:9");
        assert_ne!(message_id(&e, 1, None, 0, (0xac, 9)), message_id(&e, 1, None, 0, (0xab, 9)), "another process");
        assert_eq!(message_id(&e, 1, Some(&Position::FileOffset(42)), 2, (0xab, 9)), "0000000000000001:42:2");
        e.metadata.uid = "u".into();
        e.metadata.resource_version = "7".into();
        assert_eq!(message_id(&e, 1, Some(&Position::FileOffset(42)), 0, (0xab, 9)), "u:7");
    }
}
