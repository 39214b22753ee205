//! `eventpipe run`: source → Broadcaster → watchers (tenant router, watcher plugins) → sinks,
//! until the source ends or a signal; prints a summary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use eventpipe::correlator::CorrelationClock;
use eventpipe::delivery::{Delivery, DeliveryMode};
use eventpipe::event_broadcaster::EventBroadcasterOptions;
use eventpipe::k8s::EventsApi;
use eventpipe::k8s::KubeOptions;
use eventpipe::router::{DEFAULT_MAX_IN_FLIGHT, PartitionKey};
use eventpipe::run::{RunOptions, run};
use eventpipe::sink::SinkEntry;
use eventpipe::source::SourceSpec;
use eventpipe::source::k8s::WatchOptions;
use eventpipe::watchers::WatcherSpec;

use super::{CorrelatorArgs, PluginArgs, RuntimeArgs};

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
    /// `k8s` / `k8s:NAMESPACE`: the Kubernetes Events API; `webhook:URL`: batched JSON POSTs;
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
    /// After SIGINT / SIGTERM, seconds to drain the Broadcaster and the sinks before pending
    /// sink retries are abandoned.
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
    /// A watcher plugin to attach to the Broadcaster: a plugin name (the embedded `log`, or one
    /// in the plugins directory) or a component file; its own queue of 1000 events, dropping
    /// when full (as client-go's watchers), or as `,queue_length=N,full_channel_behavior=wait`
    /// say. Repeatable; the config's `[[watchers]]` add more.
    #[arg(long, value_name = "NAME|FILE.wasm[,KEY=VALUE…]", help_heading = "Tenants and plugins")]
    watcher: Vec<WatcherSpec>,

    /// Partitions of the tenant router, each on its own task: events are sharded by the
    /// partition key [default: one per core]. `1`: one EventCorrelator per tenant and every
    /// sink call in input order, as client-go; `0`: one per core.
    #[arg(long, value_name = "N", help_heading = "Partitions")]
    workers: Option<usize>,
    /// What an event's partition is computed from (a tenant's `partition_key` overrides it).
    #[arg(long, value_enum, default_value_t = PartitionKey::SourceObject, help_heading = "Partitions")]
    partition_key: PartitionKey,

    #[command(flatten, next_help_heading = "Correlator")]
    correlator: CorrelatorArgs,
    /// Which clock the correlator reads: the event's own time (deterministic for recorded
    /// streams) or the wall clock when it is processed (client-go).
    #[arg(long, value_enum, default_value_t = CorrelationClock::EventTime, help_heading = "Correlator")]
    clock: CorrelationClock,

    #[command(flatten, next_help_heading = "Plugins")]
    limits: PluginArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    runtime: RuntimeArgs,

    #[command(flatten, next_help_heading = "Kubernetes")]
    kube: KubeArgs,

    /// Serve Prometheus metrics at `GET /metrics` on this address (e.g. 127.0.0.1:9090).
    /// Unauthenticated, unless `$EVENTPIPE_INGEST_TOKEN` is set: then it asks for that bearer
    /// token, as HTTP ingest does.
    #[arg(long, value_name = "ADDR", help_heading = "Output")]
    metrics: Option<SocketAddr>,
    /// Print the summary as one JSON object on stderr instead of a sentence.
    #[arg(long, help_heading = "Output")]
    summary_json: bool,
}

/// The Kubernetes connection (for `--source k8s…` and `--sink k8s…`) and watch.
#[derive(Args, Debug, Clone)]
struct KubeArgs {
    /// A kubeconfig file [default: as kubectl: $KUBECONFIG, ~/.kube/config, in-cluster].
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context [default: its current context].
    #[arg(long)]
    context: Option<String>,
    /// The API server URL, overriding the kubeconfig's (e.g. `http://127.0.0.1:8001` from
    /// `kubectl proxy`).
    #[arg(long, value_name = "URL")]
    kube_server: Option<String>,
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
}

/// Runs the pipeline: exit 3 when a plugin failed under `--plugin-fallback fail`, 4 when events
/// were abandoned (see [`eventpipe::run::RunSummary::abandoned_any`]), else 0.
pub fn execute(args: RunArgs) -> anyhow::Result<ExitCode> {
    let plugins_dir = args.plugins.clone().or_else(|| {
        let default = PathBuf::from("plugins");
        default.is_dir().then_some(default)
    });
    let mut registry = args.runtime.registry(args.limits.settings())?;
    if let Some(dir) = &plugins_dir {
        registry = super::with_plugins_dir(registry, dir, "eventpipe")?;
    }
    let mut base = args.correlator.rules(&args.limits).rules(&registry)?;
    base.sinks = args.sink;
    let options = RunOptions {
        source: args.source,
        broadcaster: EventBroadcasterOptions { correlation_clock: args.clock, ..EventBroadcasterOptions::default() },
        base,
        config: args.config,
        registry: Arc::new(registry),
        watch: !args.no_watch,
        kube: KubeOptions {
            kubeconfig: args.kube.kubeconfig,
            context: args.kube.context,
            server: args.kube.kube_server,
        },
        kube_watch: WatchOptions {
            field_selector: args.kube.field_selector,
            label_selector: args.kube.label_selector,
            api: args.kube.events_api,
            replay_existing: args.kube.replay_existing,
            ..WatchOptions::default()
        },
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
        shutdown: tokio_util::sync::CancellationToken::new(),
        metrics: args.metrics,
        follow: args.follow,
        workers: match args.workers {
            None | Some(0) => std::thread::available_parallelism().map_or(1, |n| n.get()),
            Some(n) => n,
        },
        partition_key: args.partition_key,
        max_in_flight: args.max_in_flight,
        watchers: args.watcher,
        delivery: Delivery::new(args.delivery, args.state_file).map_err(anyhow::Error::msg)?,
        events_api: args.kube.events_api,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    let summary = runtime.block_on(run(options));
    // A watcher plugin cut off at shutdown may still be inside a call: do not wait for it.
    runtime.shutdown_background();
    let summary = summary?;
    if args.summary_json {
        eprintln!("{}", serde_json::to_string(&summary)?);
    } else {
        eprintln!("eventpipe run: {summary}");
    }
    Ok(if summary.plugin_failed {
        ExitCode::from(super::PLUGIN_FAILED)
    } else if summary.abandoned_any() {
        ExitCode::from(super::ABANDONED)
    } else {
        ExitCode::SUCCESS
    })
}
