//! `eventpipe run`: source → Broadcaster → tenant router watcher (filters → EventCorrelator per
//! tenant and sink → EventSink), with plugins and the tenant config hot-reloaded.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::broadcaster::FullChannelBehavior;
use crate::broadcaster::WatchEventType;
use crate::config::{Config, ConfigError};
use crate::delivery::{Committer, Delivery, Position, Progress, SavedState};
use crate::event_broadcaster::{EventBroadcaster, EventBroadcasterOptions};
use crate::k8s::KubeOptions;
use crate::metrics::Metrics;
use crate::pipeline::{PlanError, RouterStats, SinkSet, TenantPlan, TenantRules};
use crate::plugin::registry::{PluginRegistry, ReloadOutcome};
use crate::reload::{Change, FileWatcher, WatchError};
use crate::source::decode::{Decoded, Decoder};
use crate::source::k8s::WatchOptions;
use tokio_util::sync::CancellationToken;

/// Where events come from: `jsonl:PATH`, `jsonl:-` (stdin), or `k8s` / `k8s:NS[,NS…]` (a
/// Kubernetes API watch of all namespaces or the listed ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// JSON lines (or any shape the decoder accepts) from a file.
    JsonLinesFile(PathBuf),
    /// The same from standard input.
    JsonLinesStdin,
    /// A Kubernetes Events watch; empty: all namespaces.
    Kubernetes(Vec<String>),
    /// HTTP ingest on this address (`POST /api/v1/namespaces/{ns}/events`, `POST /ingest`,
    /// `GET /metrics`).
    Http(std::net::SocketAddr),
}

/// Where sink calls go: `jsonl:PATH`, `jsonl:-` (stdout), `plugin:NAME` / `plugin:FILE.wasm`
/// (a sink plugin, embedded or from a file, writing to stdout), or `k8s` / `k8s:NAMESPACE` (the
/// Kubernetes Events API; with a namespace, events of other namespaces are refused as client-go's
/// namespaced sink does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkSpec {
    /// One JSON line per sink call, to a file (created or truncated).
    JsonLinesFile(PathBuf),
    /// The same to standard output.
    JsonLinesStdout,
    /// A sink plugin: an embedded one by name (`jsonl`) or a component file.
    Plugin(String),
    /// The Kubernetes Events API; `""`: every event to its own namespace.
    Kubernetes(String),
    /// A webhook: batched JSON POSTs to this URL (`webhook:http://…` / `webhook:https://…`).
    Webhook(String),
}

impl std::fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceSpec::JsonLinesFile(p) => write!(f, "jsonl:{}", p.display()),
            SourceSpec::JsonLinesStdin => f.write_str("jsonl:-"),
            SourceSpec::Kubernetes(ns) if ns.is_empty() => f.write_str("k8s"),
            SourceSpec::Kubernetes(ns) => write!(f, "k8s:{}", ns.join(",")),
            SourceSpec::Http(addr) => write!(f, "http:{addr}"),
        }
    }
}

impl std::fmt::Display for SinkSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkSpec::JsonLinesFile(p) => write!(f, "jsonl:{}", p.display()),
            SinkSpec::JsonLinesStdout => f.write_str("jsonl:-"),
            SinkSpec::Plugin(name) => write!(f, "plugin:{name}"),
            SinkSpec::Kubernetes(ns) if ns.is_empty() => f.write_str("k8s"),
            SinkSpec::Kubernetes(ns) => write!(f, "k8s:{ns}"),
            SinkSpec::Webhook(url) => write!(f, "webhook:{url}"),
        }
    }
}

/// A `--source` / `--sink` value that is not `KIND:TARGET` with a known kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?}: expected jsonl:PATH, jsonl:-, k8s, k8s:NAMESPACE, (sources) http[:ADDR], (sinks) plugin:NAME or webhook:URL"
)]
pub struct SpecError(String);

impl std::str::FromStr for SourceSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            _ if s == "k8s" => Ok(SourceSpec::Kubernetes(Vec::new())),
            _ if s == "http" => Ok(SourceSpec::Http(([127, 0, 0, 1], 8080).into())),
            Some(("http", addr)) => addr.parse().map(SourceSpec::Http).map_err(|_| SpecError(s.into())),
            Some(("k8s", namespaces)) if !namespaces.is_empty() => {
                Ok(SourceSpec::Kubernetes(namespaces.split(',').map(|n| n.trim().to_string()).collect()))
            }
            Some(("jsonl", "-")) => Ok(SourceSpec::JsonLinesStdin),
            Some(("jsonl", path)) if !path.is_empty() => Ok(SourceSpec::JsonLinesFile(path.into())),
            _ => Err(SpecError(s.into())),
        }
    }
}

impl std::str::FromStr for SinkSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            _ if s == "k8s" => Ok(SinkSpec::Kubernetes(String::new())),
            Some(("k8s", ns)) if !ns.is_empty() => Ok(SinkSpec::Kubernetes(ns.into())),
            Some(("jsonl", "-")) => Ok(SinkSpec::JsonLinesStdout),
            Some(("jsonl", path)) if !path.is_empty() => Ok(SinkSpec::JsonLinesFile(path.into())),
            Some(("plugin", name)) if !name.is_empty() => Ok(SinkSpec::Plugin(name.into())),
            Some(("webhook", url)) if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(SinkSpec::Webhook(url.into()))
            }
            _ => Err(SpecError(s.into())),
        }
    }
}

/// What a run did: the source's side and the tenant router watcher's [`RouterStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunSummary {
    /// Events read from the source and accepted by the Broadcaster.
    pub read: u64,
    /// Input documents that could not be decoded (each logged with its line number).
    pub bad_lines: u64,
    /// Watch bookmarks and error envelopes seen (not events).
    pub non_events: u64,
    /// Events the Broadcaster's incoming queue dropped (only with `DropIfChannelFull`).
    pub dropped_incoming: u64,
    /// Plugin versions swapped in (or reverted) by hot reload during the run.
    pub plugin_swaps: u64,
    /// Plugin files and config versions refused during the run.
    pub rejected_reloads: u64,
    /// A plugin failed under the `fail` policy (the command exits with status 3).
    pub plugin_failed: bool,
    /// The sink side, in total and per tenant.
    #[serde(flatten)]
    pub sink: RouterStats,
}

impl std::fmt::Display for RunSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.sink.total;
        write!(
            f,
            "read {} events ({} bad lines, {} non-events); filtered {}; created {}, patched {}, skipped by spam \
             filter {}, aggregated {}; sink dropped {}, gave up {}, retries {}; incoming queue dropped {}; \
             {} tenant(s), {} plugin swap(s), {} config reload(s), {} rejected reload(s)",
            self.read,
            self.bad_lines,
            self.non_events,
            self.sink.filtered,
            s.created,
            s.patched,
            s.skipped,
            s.aggregated,
            s.dropped,
            s.gave_up,
            s.retries,
            self.dropped_incoming,
            self.sink.tenants.len(),
            self.plugin_swaps,
            self.sink.reloads,
            self.rejected_reloads
        )
    }
}

/// Why a run failed to start or finish (bad lines and sink errors never fail a run).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The source could not be opened or read.
    #[error("source {path}: {error}")]
    Source {
        /// The source's path (`-` for stdin).
        path: String,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// The config file is invalid (at start; later, a bad config is only reported).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The tenants' rules cannot be put together (a missing plugin, a sink that cannot open).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// At-least-once delivery cannot work (no resumable source, a bad state file).
    #[error("delivery: {0}")]
    Delivery(String),
    /// The Kubernetes API cannot be reached.
    #[error(transparent)]
    Kubernetes(#[from] crate::k8s::ConnectError),
    /// The plugins directory or config file cannot be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// A sink could not be flushed.
    #[error("sink {spec}: {error}")]
    Sink {
        /// The sink.
        spec: String,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// The sink watcher's task panicked or was cancelled.
    #[error("sink watcher failed: {0}")]
    Watcher(#[from] tokio::task::JoinError),
}

/// How to run.
#[derive(Debug)]
pub struct RunOptions {
    /// Where events come from.
    pub source: SourceSpec,
    /// Queue length, full-channel behaviour, retry policy, correlation clock (its `correlator`
    /// field is not used: tenants' rules are).
    pub broadcaster: EventBroadcasterOptions,
    /// The rules the command line gives (the base of `[defaults]` and of every tenant).
    pub base: TenantRules,
    /// The tenant config file, if any.
    pub config: Option<PathBuf>,
    /// Plugins by name (embedded defaults + plugins directory).
    pub registry: Arc<PluginRegistry>,
    /// Watch the plugins directory and the config file and hot-reload them.
    pub watch: bool,
    /// How to reach the Kubernetes API (for a `k8s` source or sink).
    pub kube: KubeOptions,
    /// What a `k8s` source watches (its namespaces come from the source spec).
    pub kube_watch: WatchOptions,
    /// After SIGINT / SIGTERM (or `shutdown` firing), how long draining the Broadcaster and the
    /// sinks may take before pending sink retries are abandoned.
    pub shutdown_timeout: std::time::Duration,
    /// Fires to stop the run as a signal would (the run also listens for SIGINT and SIGTERM).
    pub shutdown: CancellationToken,
    /// How events are delivered (sets the Broadcaster's full-channel behaviour; at-least-once
    /// also saves and resumes the source position).
    pub delivery: Delivery,
    /// Serve Prometheus `GET /metrics` on this address (an HTTP source serves it too).
    pub metrics: Option<std::net::SocketAddr>,
    /// A JSON-lines file source keeps reading as the file grows (as `tail -f`) until shutdown.
    pub follow: bool,
}

/// Prints a line about what is live (stderr, always) and logs it.
fn announce(line: &str) {
    eprintln!("eventpipe: {line}");
    tracing::info!("{line}");
}

fn announce_plan(plan: &TenantPlan) {
    for line in plan.describe() {
        announce(&line);
    }
}

/// Runs the pipeline until the source ends, then shuts the Broadcaster down (draining it) and
/// waits for the sink watcher to finish. With `watch`, plugin files and the config are
/// hot-reloaded meanwhile (compiled and validated on a thread of their own).
///
/// # Errors
/// [`RunError`] when the config, a plugin rule or a sink is invalid at start, or the source or
/// a sink cannot be read or flushed.
pub async fn run(options: RunOptions) -> Result<RunSummary, RunError> {
    let RunOptions {
        source,
        broadcaster,
        base,
        config: config_path,
        registry,
        watch,
        kube,
        kube_watch,
        shutdown_timeout,
        shutdown,
        delivery,
        metrics: metrics_addr,
        follow,
    } = options;
    let mut broadcaster = broadcaster;
    broadcaster.full_channel_behavior = match delivery {
        Delivery::AtMostOnce => FullChannelBehavior::DropIfChannelFull,
        Delivery::Wait | Delivery::AtLeastOnce { .. } => FullChannelBehavior::WaitIfChannelFull,
    };
    // At-least-once: where the last run stopped, and the progress this one makes.
    let source_name = source.to_string();
    let (progress, resume) = match &delivery {
        Delivery::AtLeastOnce { state_file } => {
            if source == SourceSpec::JsonLinesStdin {
                return Err(RunError::Delivery(
                    "at-least-once needs a file or k8s source (stdin cannot resume)".into(),
                ));
            }
            let saved = SavedState::load(state_file).map_err(|e| RunError::Delivery(e.to_string()))?;
            let resume = saved.filter(|s| s.source == source_name).map(|s| s.position);
            if let Some(p) = &resume {
                announce(&format!("resuming {source_name} from {p:?} ({})", state_file.display()));
            }
            (Some(Arc::new(Progress::default())), resume)
        }
        _ => (None, None),
    };
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let config = config_path.as_deref().map(Config::load).transpose()?;
    // One Kubernetes client for the source and every `k8s` sink, made when anything names one.
    let names_k8s =
        |rules: &crate::config::Rules| rules.sinks.iter().flatten().any(|s| s == "k8s" || s.starts_with("k8s:"));
    let needs_kube = matches!(source, SourceSpec::Kubernetes(_))
        || base.sinks.iter().any(|s| matches!(s, SinkSpec::Kubernetes(_)))
        || config.as_ref().is_some_and(|c| names_k8s(&c.defaults) || c.tenants.iter().any(|t| names_k8s(&t.rules)));
    let client = if needs_kube { Some(crate::k8s::connect(&kube).await?) } else { None };
    let sinks = Arc::new(SinkSet::new(client.clone(), progress.is_some()));
    let plan = TenantPlan::build(&base, config.as_ref(), &registry, &sinks)?;
    let (plans_tx, plans_rx) = tokio::sync::watch::channel(Arc::new(plan));
    let latest_plan = plans_tx.subscribe();
    let rejected_configs = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watcher = if watch {
        let (tx, rx) = std::sync::mpsc::channel();
        let watcher = FileWatcher::start(registry.dir(), config_path.as_deref(), move |c| {
            let _ = tx.send(c);
        })?;
        let reloader = Reloader {
            registry: registry.clone(),
            base,
            sinks: sinks.clone(),
            plans: plans_tx,
            rejected_configs: rejected_configs.clone(),
        };
        std::thread::Builder::new()
            .name("eventpipe-reload".into())
            .spawn(move || rx.into_iter().for_each(|change| reloader.apply(change)))
            .expect("spawning the reload thread");
        Some(watcher)
    } else {
        None
    };
    // Announced once the watch is running: a change made after these lines is seen.
    for (name, live) in registry.live() {
        match live {
            Some(p) => announce(&format!("{p} is live")),
            None => announce(&format!("plugin `{name}` is not loaded")),
        }
    }
    announce_plan(&latest_plan.borrow());

    let event_broadcaster = EventBroadcaster::new(broadcaster);
    let live = Arc::new(std::sync::Mutex::new(RouterStats::default()));
    let router = event_broadcaster
        .start_recording_to_tenants(plans_rx, progress.clone(), Some(live.clone()))
        .expect("a new broadcaster is running");
    // Prometheus: every scrape reads the live counters (router, plugins of the current plan,
    // registry, Broadcaster).
    let metrics = Arc::new(Metrics::new());
    {
        let (registry, plans, broadcaster, source) =
            (registry.clone(), latest_plan.clone(), event_broadcaster.broadcaster().clone(), source.to_string());
        metrics.add_source(move |s| {
            let stats = live.lock().unwrap_or_else(|p| p.into_inner()).clone();
            s.add_events_in(&source, stats.total.received);
            s.add_router(&stats);
            s.add_registry(&registry);
            s.add_broadcaster(&broadcaster);
            for handle in plans.borrow().handles() {
                s.add_plugin(handle);
            }
        });
    }
    if let Some(addr) = metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|error| RunError::Source { path: format!("metrics {addr}"), error })?;
        announce(&format!(
            "metrics on http://{}/metrics",
            listener.local_addr().map_err(|error| RunError::Source { path: format!("metrics {addr}"), error })?
        ));
        let (app, stop) = (crate::metrics::router(metrics.clone()), shutdown.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await;
        });
    }
    let committer = match (&delivery, &progress) {
        (Delivery::AtLeastOnce { state_file }, Some(progress)) => {
            let committer = Arc::new(Committer {
                state_file: state_file.clone(),
                source: source_name.clone(),
                progress: progress.clone(),
            });
            let (c, s, stop) = (committer.clone(), sinks.clone(), shutdown.child_token());
            let task = tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(COMMIT_INTERVAL) => {}
                    }
                    commit(&c, &s);
                }
            });
            Some((committer, task))
        }
        _ => None,
    };
    let mut summary = match &source {
        SourceSpec::Kubernetes(namespaces) => {
            let client = client.clone().expect("connected above for a k8s source");
            let resume_from = match &resume {
                Some(Position::ResourceVersion(rv)) => Some(rv.clone()),
                _ => None,
            };
            let options =
                WatchOptions { namespaces: namespaces.clone(), resume_from, progress: progress.clone(), ..kube_watch };
            let watch = crate::source::k8s::watch_events(
                client,
                options,
                event_broadcaster.broadcaster().clone(),
                shutdown.clone(),
            )
            .await;
            Ok(RunSummary { read: watch.events, ..RunSummary::default() })
        }
        SourceSpec::Http(addr) => serve_http(*addr, &event_broadcaster, &shutdown, &metrics).await,
        SourceSpec::JsonLinesStdin => {
            pump(tokio::io::stdin(), "-", &event_broadcaster, &shutdown, None, 0, false).await
        }
        SourceSpec::JsonLinesFile(p) => {
            let path = p.display().to_string();
            let offset = match &resume {
                Some(Position::FileOffset(o)) => *o,
                _ => 0,
            };
            match open_at(p, offset).await {
                Ok(file) => pump(file, &path, &event_broadcaster, &shutdown, progress.clone(), offset, follow).await,
                Err(error) => Err(RunError::Source { path, error }),
            }
        }
    };
    // The source has ended (or was stopped): drain the Broadcaster into the watchers and let
    // the sinks finish, within the shutdown timeout once a shutdown was asked for.
    let drain = async {
        event_broadcaster.shutdown().await;
        router.await
    };
    let router_stats = if shutdown.is_cancelled() {
        match tokio::time::timeout(shutdown_timeout, drain).await {
            Ok(stats) => stats?,
            Err(_) => {
                tracing::warn!(
                    timeout_ms = shutdown_timeout.as_millis() as u64,
                    "shutdown timeout: pending sink retries abandoned"
                );
                RouterStats::default()
            }
        }
    } else {
        drain.await?
    };
    drop(watcher);
    if let Some((committer, task)) = committer {
        task.abort();
        commit(&committer, &sinks); // what the drain finished
    }
    sinks.flush().map_err(|(spec, error)| RunError::Sink { spec, error })?;
    if let Ok(s) = summary.as_mut() {
        s.sink = router_stats;
        s.dropped_incoming = event_broadcaster.broadcaster().incoming_dropped();
        s.plugin_swaps = registry.swaps();
        s.plugin_failed = latest_plan.borrow().failed();
        s.rejected_reloads = registry.rejected() + rejected_configs.load(std::sync::atomic::Ordering::Relaxed);
    }
    summary
}

/// Applies file changes on the reload thread: plugins through the registry, the config by
/// building a new plan and handing it to the router watcher.
struct Reloader {
    registry: Arc<PluginRegistry>,
    base: TenantRules,
    sinks: Arc<SinkSet>,
    plans: tokio::sync::watch::Sender<Arc<TenantPlan>>,
    rejected_configs: Arc<std::sync::atomic::AtomicU64>,
}

impl Reloader {
    fn apply(&self, change: Change) {
        match change {
            Change::Plugin(path) => match self.registry.hot_reload_file(&path, |p| announce(&format!("{p} is live"))) {
                outcome @ (ReloadOutcome::Live(_) | ReloadOutcome::Reverted { .. }) => announce(&outcome.to_string()),
                outcome @ ReloadOutcome::Rejected { .. } => {
                    eprintln!("eventpipe: {outcome}");
                    tracing::warn!(path = %path.display(), "{outcome}");
                }
                ReloadOutcome::Unchanged { .. } | ReloadOutcome::StillRejected { .. } | ReloadOutcome::Ignored => {}
            },
            Change::Config(path) => {
                let plan = Config::load(&path).map_err(|e| e.to_string()).and_then(|c| {
                    TenantPlan::build(&self.base, Some(&c), &self.registry, &self.sinks).map_err(|e| e.to_string())
                });
                match plan {
                    Ok(plan) => {
                        announce(&format!("config {} reloaded", path.display()));
                        announce_plan(&plan);
                        let _ = self.plans.send(Arc::new(plan));
                    }
                    Err(error) => {
                        self.rejected_configs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        eprintln!("eventpipe: config rejected, previous config kept: {error}");
                        tracing::warn!(%error, "config rejected, previous config kept");
                    }
                }
            }
        }
    }
}

/// How often a followed file is checked for more lines.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// How often at-least-once saves the source position.
const COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// Flushes the sinks and saves the newest finished position; errors are logged (the next
/// commit tries again).
fn commit(committer: &Committer, sinks: &SinkSet) {
    let flush = || sinks.flush().map_err(|(spec, e)| format!("flushing sink {spec}: {e}"));
    if let Err(error) = committer.commit(flush) {
        tracing::error!(%error, "could not save the source position");
    }
}

/// HTTP ingest on `addr` until `shutdown`: every accepted event goes to the Broadcaster.
async fn serve_http(
    addr: std::net::SocketAddr,
    to: &EventBroadcaster,
    shutdown: &CancellationToken,
    metrics: &Arc<Metrics>,
) -> Result<RunSummary, RunError> {
    use crate::source::http::{BearerToken, Ingest, IngestConfig};
    let fail = |e: &dyn std::fmt::Display| RunError::Source {
        path: format!("http:{addr}"),
        error: std::io::Error::other(e.to_string()),
    };
    let token = BearerToken::from_env().map_err(|e| fail(&e))?;
    let (tx, mut rx) = tokio::sync::mpsc::channel(crate::event_broadcaster::MAX_QUEUED_EVENTS);
    let ingest = Ingest::new(IngestConfig { listen: addr, token, ..IngestConfig::default() }, tx);
    let listener = ingest.bind().await.map_err(|e| fail(&e))?;
    announce(&format!("HTTP ingest listening on {}", listener.local_addr().map_err(|e| fail(&e))?));
    let stop = shutdown.clone();
    let server = {
        let ingest = ingest.clone();
        let extra = crate::metrics::router(metrics.clone());
        tokio::spawn(async move { ingest.serve(listener, extra, stop.cancelled_owned()).await })
    };
    let mut summary = RunSummary::default();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            item = rx.recv() => match item {
                Some(item) => match to.broadcaster().action(WatchEventType::Added, item.into_event()).await {
                    Ok(()) => summary.read += 1,
                    Err(error) => tracing::error!(%error, "broadcaster refused an event"),
                },
                None => break,
            },
        }
    }
    // What was accepted before the shutdown still goes in.
    drop(ingest);
    if let Ok(Err(e)) = server.await {
        tracing::warn!(error = %e, "HTTP ingest ended with an error");
    }
    while let Ok(item) = rx.try_recv() {
        if to.broadcaster().action(WatchEventType::Added, item.into_event()).await.is_ok() {
            summary.read += 1;
        }
    }
    Ok(summary)
}

/// `path` opened and positioned at byte `offset`.
async fn open_at(path: &std::path::Path, offset: u64) -> std::io::Result<tokio::fs::File> {
    use tokio::io::AsyncSeekExt;
    let mut file = tokio::fs::File::open(path).await?;
    if offset > 0 {
        file.seek(std::io::SeekFrom::Start(offset)).await?;
    }
    Ok(file)
}

/// Fires `shutdown` on SIGINT or SIGTERM.
async fn stop_on_signal(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = shutdown.cancelled() => return,
        }
    }
    #[cfg(not(unix))]
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = shutdown.cancelled() => return,
        }
    }
    shutdown.cancel();
}

/// Reads the source line by line into the Broadcaster (waiting for room: `Action`) until it
/// ends or `shutdown` fires. With `progress`, records the byte offset (from `start`) after each
/// event's line; an earlier event of a line that holds several gets the line's start, so a
/// restart re-reads the whole line (duplicates, never gaps). With `follow`, the end of the input
/// is not its end: reading goes on as it grows (polled every [`FOLLOW_POLL`]) until `shutdown`.
async fn pump(
    input: impl AsyncRead + Unpin,
    path: &str,
    to: &EventBroadcaster,
    shutdown: &CancellationToken,
    progress: Option<Arc<Progress>>,
    start: u64,
    follow: bool,
) -> Result<RunSummary, RunError> {
    let mut summary = RunSummary::default();
    let mut reader = BufReader::with_capacity(1 << 16, input);
    let mut decoder = Decoder::new();
    let mut buf = Vec::with_capacity(4096);
    let mut offset = start;
    loop {
        buf.clear();
        let read = tokio::select! {
            _ = shutdown.cancelled() => 0,
            n = reader.read_until(b'\n', &mut buf) => n.map_err(|error| RunError::Source { path: path.into(), error })?,
        };
        if read == 0 && follow && !shutdown.is_cancelled() {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
            }
            continue;
        }
        if read > 0 && follow && !buf.ends_with(b"\n") {
            // A line still being written: read the rest of it before decoding.
            let mut rest = buf.clone();
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(FOLLOW_POLL) => {}
                }
                let more = reader
                    .read_until(b'\n', &mut rest)
                    .await
                    .map_err(|error| RunError::Source { path: path.into(), error })?;
                if more > 0 && rest.ends_with(b"\n") {
                    break;
                }
            }
            buf = rest;
        }
        let line_start = offset;
        offset += buf.len() as u64;
        let mut items = Vec::new();
        if read > 0 {
            let text = String::from_utf8_lossy(&buf);
            decoder.push_line(text.trim_end_matches(['\n', '\r']), |item| items.push(item));
        } else {
            items.extend(decoder.finish().map(Err));
        }
        let events = items.iter().filter(|i| matches!(i, Ok(Decoded::Event { .. }))).count();
        let mut nth = 0;
        for item in items {
            match item {
                Ok(Decoded::Event { event, .. }) => {
                    nth += 1;
                    if let Some(progress) = &progress {
                        progress.sent(Position::FileOffset(if nth == events { offset } else { line_start }));
                    }
                    match to.broadcaster().action(WatchEventType::Added, event).await {
                        Ok(()) => summary.read += 1,
                        Err(error) => tracing::error!(%error, "broadcaster refused an event"),
                    }
                }
                Ok(other) => {
                    tracing::info!(
                        source = path,
                        line = other.line(),
                        what = other.describe(),
                        "not an event, skipped"
                    );
                    summary.non_events += 1;
                }
                Err(error) => {
                    tracing::warn!(source = path, %error, "bad input skipped");
                    summary.bad_lines += 1;
                }
            }
        }
        if read == 0 {
            return Ok(summary);
        }
    }
}
