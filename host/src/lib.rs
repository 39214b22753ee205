//! eventpipe: the Kubernetes event machinery (client-go `tools/record`, apimachinery
//! `watch.Broadcaster`) as a fast host whose policy comes from WebAssembly plugins.
//!
//! # Data flow
//!
//! ```text
//!  source ──► Broadcaster ──┬─► tenant router watcher ─► partition 0..N (by PartitionKey)
//!  (jsonl,    (one ordered  │     each: TenantStage per tenant:
//!   k8s,       incoming     │       route ─► filters (Wasm) ─► keys ─► EventCorrelator
//!   http)      queue)       │     ─► every sink of the tenant (writes in flight, per-event order,
//!                           │        client-go's recordToSink retries) ─► acknowledgements
//!                           │        └─► with --serve: the watch cache (resourceVersions, a window
//!                           │            of changes) ─► GET /api/v1/events, watches, result watchers
//!                           ├─► watcher plugins (Wasm; own queue, drop or wait when full)
//!                           └─► any other watcher (EventBroadcaster::start_recording_to_sink, …)
//! ```
//!
//! Where to start:
//! - [`run()`] runs the whole pipeline from [`RunOptions`] (what `eventpipe run` does): the
//!   [`topology`] builds its pieces (role, checkpointer, sinks, plan and reloader, Broadcaster
//!   and router, watchers, servers, source) and owns their start and shutdown order;
//!   [`replay()`] runs one [`TenantStage`] over a recorded stream (`eventpipe replay`).
//! - [`EventBroadcaster`] and [`EventRecorder`] are client-go's recording API:
//!   `start_recording_to_sink` attaches the same tenant stage to any [`EventSink`] (whose
//!   calls answer what they [`Stored`]: the event as sent, or the sink's own copy).
//! - [`EventCorrelator`] is client-go's correlator (aggregator → logger → spam filter), with
//!   its key functions pluggable ([`correlator`]).
//! - [`watch_cache`] is the apiserver's Cacher for what eventpipe wrote: the correlated Events
//!   with resourceVersions (which continue across restarts: [`watch_cache::resource_version`]),
//!   a [`watch_cache::window::Window`] of changes that watchers resume from, and the
//!   Kubernetes read API (`run --serve`) that kubectl and informers read.
//! - [`TenantPlan`] is what tenants run: rules from the command line ([`CommandLineRules`]) and
//!   the [`Config`], plugins from the [`PluginRegistry`], sinks from [`SinkSpec`]s.
//!
//! # Layout
//!
//! Modules sit in layers; each imports only modules below it. From the top:
//! - [`commands`]: the subcommands' bodies (`run`, `replay`, `test`, `bench`, `validate`,
//!   `top`, `new-plugin`).
//! - [`topology`]: `eventpipe run`'s running topology: the [`topology::Role`] (single host,
//!   publish tier, worker tier), the pieces built from the grouped [`RunOptions`] (source or
//!   worker tier, Broadcaster and tenant router or publish tier, sinks and watch cache, plan and
//!   reloader, watcher plugins, HTTP servers, checkpointer), and [`topology::RunningTopology`],
//!   which drains them in order and produces the [`RunSummary`].
//! - [`record`]: client-go's `tools/record` (EventRecorder, EventBroadcaster) and
//!   `tools/events` (EventSeries).
//! - [`pipeline`]: above the Broadcaster: tenant plans, the tenant stage, the router, "N
//!   suppressed" summaries, the scale-out tiers.
//! - [`config`], [`watchers`], [`sink`], [`oci`], [`plugin`], [`watch_cache`], [`source`]: the
//!   tenant config file, Broadcaster watchers, EventSinks, plugins in OCI registries, the Wasm
//!   runtime (the only wasmtime user), the apiserver-style watch cache, the sources.
//! - [`correlator`], [`tenant`] (matching and drop/keep rules), [`partition`], [`broadcaster`],
//!   [`delivery`], [`election`] (leader-election terms), [`k8s`] (the API server connection),
//!   [`nats`], [`event`], [`clock`], and the
//!   small ones ([`health`], [`http_server`], [`logging`], [`redact`], [`reload`], [`suggest`], [`metrics`]:
//!   the `/metrics` families, their lock-free histograms and their server; each module above
//!   adds its own counters and histograms): the ground floor.

pub mod broadcaster;
pub mod clock;
pub mod commands;
pub mod config;
pub mod correlator;
pub mod delivery;
pub mod election;
pub mod event;
pub mod health;
pub mod http_server;
pub mod k8s;
pub mod logging;
pub mod metrics;
pub mod nats;
pub mod oci;
pub mod partition;
pub mod pipeline;
pub mod plugin;
pub mod record;
pub mod redact;
pub mod reload;
pub mod sink;
pub mod source;
pub mod suggest;
pub mod tenant;
pub mod topology;
pub mod watch_cache;
pub mod watchers;

pub use broadcaster::{Broadcaster, FullChannelBehavior, WatchEvent, WatchEventType, Watcher};
pub use commands::replay::{ReplayOptions, replay};
pub use commands::run::{RunOptions, RunSummary, run};
pub use config::Config;
pub use correlator::{CorrelatorOptions, EventCorrelateResult, EventCorrelator};
pub use delivery::{Delivery, DeliveryMode};
pub use event::Event;
pub use partition::PartitionKey;
pub use pipeline::plan::{CommandLineRules, TenantPlan, TenantRules};
pub use pipeline::router::RouterStats;
pub use pipeline::stage::TenantStage;
pub use plugin::registry::PluginRegistry;
pub use plugin::{PluginKind, PluginRuntime, PluginSettings};
pub use record::event_broadcaster::{EventBroadcaster, EventBroadcasterOptions};
pub use record::recorder::EventRecorder;
pub use sink::{EventSink, SinkSpec, Stored};
pub use source::{Source, SourceSpec, SourceStats};
