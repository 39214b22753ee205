//! `eventpipe run`: source → Broadcaster → watchers (tenant router, watcher plugins) → sinks,
//! until the source ends or a signal; prints a summary.

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use eventpipe::commands::run::{
    DeliveryOptions, KubernetesOptions, LimitOptions, PluginOptions, RunOptions, ScaleOptions, ServingOptions,
    SourceOptions, run, run_elected,
};
use eventpipe::correlator::CorrelationClock;
use eventpipe::delivery::{Delivery, DeliveryMode};
use eventpipe::k8s::EventsApi;
use eventpipe::pipeline::router::{DEFAULT_MAX_IN_FLIGHT, PartitionKey};
use eventpipe::record::event_broadcaster::EventBroadcasterOptions;
use eventpipe::sink::SinkEntry;
use eventpipe::source::k8s::WatchOptions;
use eventpipe::source::k8s::stall::StallOptions;
use eventpipe::source::{SourceCounters, SourceSpec};
use eventpipe::topology::leader::LeaderElectionConfig;
use eventpipe::watchers::WatcherSpec;

use super::{CorrelatorArgs, FilterArgs, KubeConnectionArgs, OciArgs, PinArgs, PluginArgs, RuntimeArgs};

/// `eventpipe run` flags, grouped in `--help` by what they set.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// `jsonl:PATH` or `jsonl:-` (stdin): JSON lines, watch envelopes, EventLists or
    /// `kubectl get events -w -o json` output; `k8s` / `k8s:NS[,NS…]`: a Kubernetes watch;
    /// `http` / `http:ADDR` (default 127.0.0.1:8080): HTTP ingest (client-go's event paths and
    /// `POST /ingest`; a non-loopback address needs $EVENTPIPE_INGEST_TOKEN).
    #[arg(long, help_heading = "Source")]
    source: SourceSpec,
    /// Keep reading a `jsonl:FILE` source as it grows (as `tail -f`) until SIGINT / SIGTERM.
    #[arg(long, help_heading = "Source")]
    follow: bool,

    /// `jsonl:PATH` or `jsonl:-` (stdout): one `{"verb","event","patch"}` line per sink call;
    /// `k8s` / `k8s:NAMESPACE`: the Kubernetes Events API; `webhook:URL`: batched JSON POSTs
    /// (options `,concurrency=adaptive|N`, `,max_batch=N`, `,max_batch_bytes=N`; docs/webhook.md);
    /// `otlp:http(s)://HOST:PORT[/v1/logs]`: OTLP/HTTP log records, one per write (the webhook's
    /// options; docs/otlp.md); `loki:URL`, `elasticsearch:URL`, `splunk:URL`: log stores (the
    /// webhook's options and their own, credentials from the environment; docs/log-stores.md);
    /// `metrics[,max_series=N]`: event counters on `/metrics`;
    /// `plugin:NAME` or `plugin:FILE.wasm`: a sink plugin. `,delivery=MODE` after any of them
    /// gives that sink its own delivery mode. Repeatable. The sinks of tenants whose config names
    /// none; required unless the config's `[defaults]` gives `sinks`.
    #[arg(long, help_heading = "Sinks")]
    sink: Vec<SinkEntry>,
    /// Writes in flight per sink (1: client-go's one write at a time).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_IN_FLIGHT, help_heading = "Sinks")]
    max_in_flight: usize,

    /// `at-most-once` (DropIfChannelFull), `wait` (WaitIfChannelFull: nothing lost in process), or
    /// `at-least-once` (wait, and the source position is saved in `--state-file` once every sink
    /// acknowledged, so a restart resumes without loss). A sink's own `,delivery=MODE` overrides
    /// it for that sink.
    #[arg(long, value_enum, default_value_t = DeliveryMode::Wait, help_heading = "Delivery")]
    delivery: DeliveryMode,
    /// The state file of `--delivery at-least-once`.
    #[arg(long, value_name = "FILE", required_if_eq("delivery", "at-least-once"), help_heading = "Delivery")]
    state_file: Option<PathBuf>,
    /// `--delivery at-least-once`: seconds between the positions saved in `--state-file` at
    /// most, each with the correlator state of the events before it, once every sink
    /// acknowledged them (marked four times an interval and every 1,000 events; saved while
    /// draining too). What a crash writes again is bounded by it.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, help_heading = "Delivery")]
    checkpoint_interval: f64,
    /// After SIGINT / SIGTERM, seconds to drain the Broadcaster and the sinks before pending
    /// sink retries are abandoned. The publish tier (`--sink nats:`) also goes on publishing
    /// failed publications again for this long after the end of its input.
    #[arg(long, value_name = "SECONDS", default_value_t = 30, help_heading = "Delivery")]
    shutdown_timeout: u64,

    /// The tenant config (TOML), watched and hot-reloaded.
    #[arg(long, value_name = "FILE", help_heading = "Tenants and plugins")]
    config: Option<PathBuf>,
    /// The plugins directory: every NAME.wasm in it is plugin NAME (overriding an embedded one
    /// of that name), watched and hot-swapped [default: ./plugins when it exists].
    #[arg(long, value_name = "DIR", help_heading = "Tenants and plugins")]
    plugins: Option<PathBuf>,
    /// Do not watch the plugins directory and config file.
    #[arg(long, help_heading = "Tenants and plugins")]
    no_watch: bool,
    #[command(flatten, next_help_heading = "Tenants and plugins")]
    filters: FilterArgs,
    /// A watcher plugin to attach to the Broadcaster: a plugin name (the embedded `log`, or one
    /// in the plugins directory) or a component file; its own queue of 1000 events, dropping
    /// when full (as client-go's watchers), or as `,queue_length=N,full_channel_behavior=wait`
    /// say. Repeatable; the config's `[[watchers]]` add more.
    #[arg(long, value_name = "NAME|FILE.wasm[,KEY=VALUE…]", help_heading = "Tenants and plugins")]
    watcher: Vec<WatcherSpec>,

    /// Partitions of the tenant router, each on its own task: events are sharded by the
    /// partition key [default: 1]. `1`: one EventCorrelator per tenant and every sink call in
    /// input order, client-go's output at any cache pressure; N > 1: N EventCorrelators per
    /// tenant, each client-go's over its partition's events with caches of its own; `0`: one
    /// per core.
    #[arg(long, value_name = "N", help_heading = "Partitions")]
    workers: Option<usize>,
    /// What an event's partition is computed from (a tenant's `partition_key` overrides it).
    #[arg(long, value_enum, default_value_t = PartitionKey::SourceObject, help_heading = "Partitions")]
    partition_key: PartitionKey,
    /// With a `nats:` source: this worker is I of N and takes the stream's partitions p with
    /// p mod N = I (`I/N`, or a StatefulSet pod name `NAME-I/N`) [default: 0/1, all].
    #[arg(long, value_name = "I/N", help_heading = "Partitions")]
    worker: Option<eventpipe::pipeline::scale::WorkerIndex>,
    /// Seconds between correlator snapshots of a `nats:` worker's partitions into the stream's
    /// object store (also at the end). What a crash writes again is bounded by it. (An
    /// at-least-once run saves its snapshots with its positions: `--checkpoint-interval`.)
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, help_heading = "Partitions")]
    snapshot_interval: f64,

    #[command(flatten, next_help_heading = "Correlator")]
    correlator: CorrelatorArgs,
    /// Which clock the correlator reads: the event's own time (deterministic for recorded
    /// streams) or the wall clock when it is processed (client-go).
    #[arg(long, value_enum, default_value_t = CorrelationClock::EventTime, help_heading = "Correlator")]
    clock: CorrelationClock,

    /// A shadow plugin: a candidate component run beside plugin NAME on the same events, in
    /// instances of its own, never affecting output; where it answers otherwise, counted (and
    /// written to `--shadow-diffs`). Repeatable; the config's `[shadow]` adds more.
    #[arg(long, value_name = "NAME=FILE.wasm", value_parser = parse_shadow, help_heading = "Plugins")]
    shadow: Vec<(String, PathBuf)>,
    /// The JSON-lines file the first divergences of shadow plugins go to, with both answers.
    #[arg(long, value_name = "FILE", help_heading = "Plugins")]
    shadow_diffs: Option<PathBuf>,
    /// How many divergences `--shadow-diffs` gets at most [default: 100].
    #[arg(long, value_name = "N", help_heading = "Plugins")]
    shadow_diffs_max: Option<u64>,

    #[command(flatten, next_help_heading = "Plugins")]
    limits: PluginArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    runtime: RuntimeArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    pins: PinArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    oci: OciArgs,

    #[command(flatten, next_help_heading = "Kubernetes")]
    kube: KubeArgs,
    #[command(flatten, next_help_heading = "Leader election")]
    leader: LeaderArgs,
    #[command(flatten, next_help_heading = "Enrichment")]
    enrich: EnrichArgs,

    /// Serve Prometheus metrics at `GET /metrics` on this address (e.g. 127.0.0.1:9090).
    /// Unauthenticated, unless `$EVENTPIPE_INGEST_TOKEN` is set: then it asks for that bearer
    /// token, as HTTP ingest does.
    #[arg(long, value_name = "ADDR", help_heading = "Output")]
    metrics: Option<SocketAddr>,
    /// Serve the Kubernetes read API of the correlated events on this address, beside
    /// `/metrics` and the probes: `GET /api/v1/events`, `/api/v1/namespaces/NS/events` (list,
    /// `?watch=true`, selectors), for kubectl and informers. Turns the watch cache on: every
    /// tenant's writes go to it too. Beyond loopback it needs `$EVENTPIPE_INGEST_TOKEN`, as
    /// HTTP ingest does; an HTTP source serves it as well (the same address: only that server).
    #[arg(long, value_name = "ADDR", help_heading = "Output")]
    serve: Option<SocketAddr>,
    #[command(flatten, next_help_heading = "Watch cache (--serve)")]
    watch_cache: WatchCacheArgs,
    #[command(flatten, next_help_heading = "HTTP servers (http source, --serve, --metrics)")]
    http: HttpServerArgs,
    /// Print the summary as one JSON object instead of a sentence: on stderr (with the logs),
    /// `=-` on stdout, `=FILE` into FILE.
    #[arg(long, value_name = "FILE|-", num_args = 0..=1, require_equals = true, default_missing_value = "", help_heading = "Output")]
    summary_json: Option<String>,
}

/// Limits of every HTTP server of the run (see `eventpipe::http_server`).
#[derive(Args, Debug, Clone)]
pub struct HttpServerArgs {
    /// Time a client has to send a complete request head, seconds; also how long an idle
    /// keep-alive connection stays open.
    #[arg(long, value_name = "SECONDS", default_value_t = eventpipe::http_server::DEFAULT_HEADER_READ_TIMEOUT.as_secs_f64())]
    http_header_timeout: f64,
    /// Time a client has to send a complete request body, seconds (from its head).
    #[arg(long, value_name = "SECONDS", default_value_t = eventpipe::http_server::DEFAULT_BODY_TIMEOUT.as_secs_f64())]
    http_body_timeout: f64,
    /// Open connections per server at most; at the cap the oldest connection that has not
    /// sent a complete request head is closed to make room, else the slowest body below
    /// --http-min-body-rate; when every connection is serving, requests are answered 429 with
    /// Retry-After (the probes are always answered).
    #[arg(long, value_name = "N", default_value_t = eventpipe::http_server::DEFAULT_MAX_CONNECTIONS)]
    http_max_connections: usize,
    /// Bytes per second a request body must average once it is being read (checked from 2 s
    /// on) not to be shed when the connection cap is near; 0: never shed for its rate.
    #[arg(long, value_name = "BYTES", default_value_t = eventpipe::http_server::DEFAULT_MIN_BODY_RATE)]
    http_min_body_rate: u64,
}

impl HttpServerArgs {
    fn limits(&self) -> anyhow::Result<eventpipe::http_server::ServerLimits> {
        let seconds = |flag: &str, s: f64| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .with_context(|| format!("--{flag}: expected seconds > 0"))
        };
        Ok(eventpipe::http_server::ServerLimits {
            header_read_timeout: seconds("http-header-timeout", self.http_header_timeout)?,
            body_timeout: seconds("http-body-timeout", self.http_body_timeout)?,
            max_connections: self.http_max_connections.max(1),
            min_body_rate: self.http_min_body_rate,
        })
    }
}

/// The watch cache behind `--serve` (see `eventpipe::watch_cache`). Each flag wins over the
/// config's `[watch_cache]` key named after it; the default applies where neither is given.
#[derive(Args, Debug, Clone)]
struct WatchCacheArgs {
    /// Changes kept for watchers to resume from (resourceVersions; an older one gets 410)
    /// [default: 10000; config: watch_cache.size].
    #[arg(long, value_name = "N")]
    watch_cache_size: Option<usize>,
    /// Longest a change is kept for resuming watchers, seconds [default: 300; config:
    /// watch_cache.age_seconds].
    #[arg(long, value_name = "SECONDS")]
    watch_cache_age: Option<u64>,
    /// Most events held; beyond it the least recently changed one is deleted [default: 10000;
    /// config: watch_cache.objects].
    #[arg(long, value_name = "N")]
    watch_cache_objects: Option<usize>,
    /// An event not changed for this long is deleted (the apiserver's --event-ttl), seconds
    /// [default: 3600; config: watch_cache.event_ttl_seconds].
    #[arg(long, value_name = "SECONDS")]
    event_ttl: Option<u64>,
    /// Events queued towards one watch connection [default: 100; config:
    /// watch_cache.queue_length].
    #[arg(long, value_name = "N")]
    watch_queue_length: Option<usize>,
    /// How long a watch's full queue may wait for its client before the watch is cut off
    /// (the client resumes from its last resourceVersion), seconds [default: 10; config:
    /// watch_cache.budget_seconds].
    #[arg(long, value_name = "SECONDS")]
    watch_budget: Option<f64>,
    /// Interval between bookmarks of a watch that allows them, seconds [default: 60; config:
    /// watch_cache.bookmark_interval_seconds].
    #[arg(long, value_name = "SECONDS")]
    watch_bookmark_interval: Option<f64>,
}

impl WatchCacheArgs {
    fn settings(&self) -> eventpipe::watch_cache::WatchCacheSettings {
        eventpipe::watch_cache::WatchCacheSettings {
            size: self.watch_cache_size,
            age_seconds: self.watch_cache_age,
            objects: self.watch_cache_objects,
            event_ttl_seconds: self.event_ttl,
            queue_length: self.watch_queue_length,
            budget_seconds: self.watch_budget,
            bookmark_interval_seconds: self.watch_bookmark_interval,
        }
    }
}

/// Leader election on a Lease ([`eventpipe::topology::leader`]), as client-go's
/// `leaderelection`. Each flag wins over the config's `[leader_election]` key named after it;
/// client-go's default applies where neither is given.
#[derive(Args, Debug, Clone)]
struct LeaderArgs {
    /// Run the pipeline only while this process holds a `coordination.k8s.io/v1` Lease, as
    /// client-go's `leaderelection`: other replicas wait as candidates and take over when the
    /// leader stops (released at SIGTERM) or stops renewing. A leader that cannot renew within
    /// the renew deadline exits (status 1) before its Lease can expire [config:
    /// leader_election.enabled].
    #[arg(long)]
    leader_elect: bool,
    /// The Lease, `NAMESPACE/NAME` or `NAME` [default: $POD_NAMESPACE (else the service
    /// account's namespace, else `default`) / `eventpipe`; config: leader_election.lease].
    #[arg(long, value_name = "NAMESPACE/NAME")]
    leader_elect_lease: Option<String>,
    /// Seconds a Lease holds without renewal, as candidates observe it [default: 15; config:
    /// leader_election.lease_duration_seconds].
    #[arg(long, value_name = "SECONDS")]
    leader_elect_lease_duration: Option<f64>,
    /// Seconds the leader tries to renew before it steps down (< the lease duration) [default:
    /// 10; config: leader_election.renew_deadline_seconds].
    #[arg(long, value_name = "SECONDS")]
    leader_elect_renew_deadline: Option<f64>,
    /// Seconds between tries to acquire or renew (× 1.2 < the renew deadline) [default: 2;
    /// config: leader_election.retry_period_seconds].
    #[arg(long, value_name = "SECONDS")]
    leader_elect_retry_period: Option<f64>,
}

impl LeaderArgs {
    /// The election's terms: these flags over the `[leader_election]` of the config file `file`
    /// over client-go's defaults ([`eventpipe::config::LeaderElectionSettings::resolve`]);
    /// `None` when neither turns election on.
    fn config(&self, file: Option<&std::path::Path>) -> anyhow::Result<Option<LeaderElectionConfig>> {
        let seconds = |flag: &str, s: Option<f64>| {
            s.map(|s| Duration::try_from_secs_f64(s).with_context(|| format!("{flag}: expected seconds > 0, not {s}")))
                .transpose()
        };
        let flags = eventpipe::config::LeaderElectionSettings {
            enabled: self.leader_elect.then_some(true),
            lease: self.leader_elect_lease.clone(),
            lease_duration: seconds("--leader-elect-lease-duration", self.leader_elect_lease_duration)?,
            renew_deadline: seconds("--leader-elect-renew-deadline", self.leader_elect_renew_deadline)?,
            retry_period: seconds("--leader-elect-retry-period", self.leader_elect_retry_period)?,
        };
        let file = match file {
            Some(path) => eventpipe::Config::load(path)?.leader_election,
            None => eventpipe::config::LeaderElectionSettings::default(),
        };
        eventpipe::config::LeaderElectionSettings::resolve(&flags, &file).map_err(anyhow::Error::msg)
    }
}

/// Enrichment (see `eventpipe::k8s::enrich`): each flag wins over the config's `[enrich]` key
/// named after it. Off unless a flag or a key turns it on.
#[derive(Args, Debug, Clone)]
struct EnrichArgs {
    /// Attach the involved object's labels whose keys match these globs (comma-separated,
    /// e.g. `app.kubernetes.io/*,team`) [config: enrich.labels].
    #[arg(long, value_name = "GLOB,…", value_delimiter = ',')]
    enrich_labels: Option<Vec<String>>,
    /// Attach its annotations whose keys match these globs [config: enrich.annotations].
    #[arg(long, value_name = "GLOB,…", value_delimiter = ',')]
    enrich_annotations: Option<Vec<String>>,
    /// Attach the top owner, following the controller ownerReferences (Pod → ReplicaSet →
    /// Deployment) [config: enrich.owner].
    #[arg(long)]
    enrich_owner: bool,
    /// Attach a Pod's node and its labels whose keys match these globs [config:
    /// enrich.node_labels].
    #[arg(long, value_name = "GLOB,…", value_delimiter = ',')]
    enrich_node_labels: Option<Vec<String>>,
    /// Attach this cluster name [config: enrich.cluster].
    #[arg(long, value_name = "NAME")]
    cluster_name: Option<String>,
    /// The longest an event waits for its enrichment, milliseconds [default: 100; config:
    /// enrich.wait_ms].
    #[arg(long, value_name = "MS")]
    enrich_wait: Option<u64>,
    /// Objects each kind's cache holds at most (least recently used out) [default: 100000;
    /// config: enrich.max_objects].
    #[arg(long, value_name = "N")]
    enrich_max_objects: Option<usize>,
}

impl EnrichArgs {
    fn settings(&self) -> eventpipe::k8s::enrich::EnrichSettings {
        eventpipe::k8s::enrich::EnrichSettings {
            labels: self.enrich_labels.clone(),
            annotations: self.enrich_annotations.clone(),
            owner: self.enrich_owner.then_some(true),
            node_labels: self.enrich_node_labels.clone(),
            cluster: self.cluster_name.clone(),
            wait: self.enrich_wait.map(Duration::from_millis),
            max_objects: self.enrich_max_objects,
        }
    }
}

/// The Kubernetes connection (for `--source k8s…` and `--sink k8s…`) and watch.
#[derive(Args, Debug, Clone)]
struct KubeArgs {
    #[command(flatten)]
    connection: KubeConnectionArgs,
    /// Watch only events matching this field selector (e.g. `involvedObject.kind=Pod`).
    #[arg(long)]
    field_selector: Option<String>,
    /// Watch only events matching this label selector.
    #[arg(long)]
    label_selector: Option<String>,
    /// Which Events API the `k8s` source watches and `k8s` sinks write to; with
    /// `events.k8s.io`, sinks record as client-go's `tools/events` (create, series patches, a
    /// final patch 6 minutes after the last occurrence and at the end of the run).
    #[arg(long, value_enum, default_value_t = EventsApi::CoreV1)]
    events_api: EventsApi,
    /// Also send on the events already in the cluster when the watch starts.
    #[arg(long)]
    replay_existing: bool,
    /// How long the `k8s` source's watch may deliver nothing while the API server has moved
    /// past it before it is restarted from its position, and how long the API server may answer
    /// nothing (or sinks acknowledge nothing while writes wait) before `/readyz` fails, seconds;
    /// 0: never.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0)]
    stall_timeout: f64,
    /// How often a quiet watch is checked for a stall (a `list?limit=1`), seconds [default: a
    /// quarter of --stall-timeout].
    #[arg(long, value_name = "SECONDS")]
    stall_check_interval: Option<f64>,
}

impl KubeArgs {
    /// The stall rule of `--stall-timeout` and `--stall-check-interval`.
    fn stall(&self) -> anyhow::Result<StallOptions> {
        let seconds = |flag: &str, s: f64| {
            Duration::try_from_secs_f64(s).with_context(|| format!("{flag}: expected seconds >= 0, not {s}"))
        };
        let mut stall = StallOptions::with_timeout(seconds("--stall-timeout", self.stall_timeout)?);
        if let Some(every) = self.stall_check_interval {
            stall.check_interval = seconds("--stall-check-interval", every)?;
        }
        Ok(stall)
    }
}

/// Runs the pipeline: exit 3 when a plugin failed under `--plugin-fallback fail`, 4 when events
/// were abandoned (see [`eventpipe::commands::run::RunSummary::abandoned_any`]), else 0.
pub fn execute(args: RunArgs) -> anyhow::Result<ExitCode> {
    let registry = super::run_registry(
        &args.runtime,
        &args.limits,
        args.plugins.as_deref(),
        (&args.pins, &args.oci),
        args.config.as_deref(),
        "eventpipe",
    )?;
    let mut base = args.filters.apply(args.correlator.rules(&args.limits)).rules(&registry)?;
    base.sinks = args.sink;
    let stall = args.kube.stall()?;
    let election = args.leader.config(args.config.as_deref())?;
    let options = RunOptions {
        source: SourceOptions { spec: args.source, follow: args.follow, counters: Arc::new(SourceCounters::default()) },
        kubernetes: KubernetesOptions {
            connection: args.kube.connection.options(),
            watch: WatchOptions {
                field_selector: args.kube.field_selector,
                label_selector: args.kube.label_selector,
                api: args.kube.events_api,
                replay_existing: args.kube.replay_existing,
                stall,
                ..WatchOptions::default()
            },
            events_api: args.kube.events_api,
            enrich: args.enrich.settings(),
        },
        delivery: DeliveryOptions {
            mode: Delivery::new(args.delivery, args.state_file).map_err(anyhow::Error::msg)?,
            checkpoint_interval: Duration::try_from_secs_f64(args.checkpoint_interval)
                .ok()
                .filter(|d| !d.is_zero())
                .context("--checkpoint-interval: expected seconds > 0")?,
            broadcaster: EventBroadcasterOptions {
                correlation_clock: args.clock,
                ..EventBroadcasterOptions::default()
            },
            handover: None,
        },
        scale: ScaleOptions {
            workers: match args.workers {
                None => 1,
                Some(0) => std::thread::available_parallelism().map_or(1, |n| n.get()),
                Some(n) => n,
            },
            partition_key: args.partition_key,
            worker: args.worker,
            snapshot_interval: Duration::try_from_secs_f64(args.snapshot_interval)
                .ok()
                .filter(|d| !d.is_zero())
                .context("--snapshot-interval: expected seconds > 0")?,
        },
        serving: ServingOptions {
            metrics: args.metrics,
            serve: args.serve,
            watch_cache: args.watch_cache.settings(),
            http_limits: args.http.limits()?,
            leader: None,
        },
        plugins: PluginOptions {
            base,
            config: args.config,
            registry: Arc::new(registry),
            watch: !args.no_watch,
            watchers: args.watcher,
            shadows: args.shadow,
            shadow_diffs: args.shadow_diffs,
            shadow_diffs_max: args.shadow_diffs_max,
        },
        limits: LimitOptions {
            max_in_flight: args.max_in_flight,
            shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
        },
        shutdown: tokio_util::sync::CancellationToken::new(),
    };
    // A JSON-lines file (or stdin redirected from one) read to its end: a progress bar on a
    // terminal, fed by the source's live counters.
    let file_len = match &options.source.spec {
        SourceSpec::JsonLinesFile(path) if !options.source.follow => {
            std::fs::metadata(path).ok().filter(|m| m.is_file()).map(|m| m.len())
        }
        SourceSpec::JsonLinesStdin => stdin_file_len(),
        _ => None,
    };
    let progress = file_len.and_then(|len| {
        let counters = options.source.counters.clone();
        Progress::start(len, "events", move || (counters.bytes_read(), counters.stats().read))
    });
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    let summary = match election {
        None => runtime.block_on(run(options)),
        Some(config) => match runtime.block_on(run_elected(options, config, Box::new(leadership_lost)))? {
            Some(summary) => Ok(summary),
            // Stopped while a candidate: nothing ran.
            None => return Ok(ExitCode::SUCCESS),
        },
    };
    if let Some(progress) = progress {
        progress.finish();
    }
    // A watcher plugin cut off at shutdown may still be inside a call: do not wait for it.
    runtime.shutdown_background();
    let summary = summary?;
    match args.summary_json.as_deref() {
        None => eprintln!("eventpipe run: {summary}"),
        Some("") => eprintln!("{}", serde_json::to_string(&summary)?),
        Some("-") => println!("{}", serde_json::to_string(&summary)?),
        Some(file) => std::fs::write(file, serde_json::to_string(&summary)? + "\n")
            .with_context(|| format!("--summary-json: writing {file}"))?,
    }
    Ok(if summary.plugin_failed {
        ExitCode::from(super::PLUGIN_FAILED)
    } else if summary.abandoned_any() {
        ExitCode::from(super::ABANDONED)
    } else {
        ExitCode::SUCCESS
    })
}

/// A leader whose Lease renewal failed exits at once (status 1), as kube-controller-manager's
/// "leaderelection lost": another replica may lead by now, and this one must write nothing more.
fn leadership_lost() {
    eprintln!("eventpipe: leader election lost: exiting");
    std::process::exit(1);
}

/// How often the progress bar reads its counters.
const PROGRESS_TICK: Duration = Duration::from_millis(100);

/// A progress bar on stderr while a file is read (bytes of its size, and a count per second),
/// shown only when stderr is a terminal. A thread reads the reader's counters every
/// [`PROGRESS_TICK`]; the reading side only adds to atomics, once per chunk.
pub(super) struct Progress {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    /// Starts the bar for a file of `len` bytes; `counters` gives (bytes read, `what` counted)
    /// so far. `None` (and nothing drawn) unless stderr is a terminal.
    pub(super) fn start(
        len: u64,
        what: &'static str,
        counters: impl Fn() -> (u64, u64) + Send + 'static,
    ) -> Option<Progress> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let style = indicatif::ProgressStyle::with_template(
            "{spinner} {elapsed_precise} [{wide_bar}] {binary_bytes}/{binary_total_bytes} {msg}",
        )
        .ok()?
        .progress_chars("=> ");
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("eventpipe-progress".into())
            .spawn(move || {
                // Drawn from the first byte read on, so that what the command prints while it
                // starts is not mixed with the bar.
                let mut bar: Option<indicatif::ProgressBar> = None;
                // (time, count) over the last second or so: the rate shown.
                let mut window = VecDeque::new();
                let mut running = true;
                while running {
                    running = matches!(stopped.recv_timeout(PROGRESS_TICK), Err(mpsc::RecvTimeoutError::Timeout));
                    let (bytes, count) = counters();
                    if bytes == 0 && count == 0 {
                        continue;
                    }
                    let bar = bar.get_or_insert_with(|| {
                        let bar = indicatif::ProgressBar::with_draw_target(
                            Some(len),
                            indicatif::ProgressDrawTarget::stderr(),
                        );
                        bar.set_style(style.clone());
                        bar
                    });
                    let now = Instant::now();
                    window.push_back((now, count));
                    while window.len() > 2 && now - window[1].0 >= Duration::from_secs(1) {
                        window.pop_front();
                    }
                    let (then, before) = window[0];
                    let secs = (now - then).as_secs_f64();
                    let rate = if secs > 0.0 { count.saturating_sub(before) as f64 / secs } else { 0.0 };
                    bar.set_message(format!("{count} {what}, {rate:.0} {what}/s"));
                    bar.set_position(bytes.min(len));
                }
                if let Some(bar) = bar {
                    bar.finish_and_clear();
                }
            })
            .ok()?;
        Some(Progress { stop, thread })
    }

    /// Stops the bar and clears it from the terminal.
    pub(super) fn finish(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

/// The size of the regular file standard input is redirected from, if it is one.
pub(super) fn stdin_file_len() -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
        let meta = std::fs::File::from(fd).metadata().ok()?;
        meta.is_file().then_some(meta.len())
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `NAME=FILE.wasm`.
fn parse_shadow(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => Ok((name.to_string(), PathBuf::from(file))),
        _ => Err(format!("{s:?}: expected NAME=FILE.wasm (a plugin name and its candidate)")),
    }
}
