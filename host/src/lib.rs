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
//! - [`run()`] runs the whole pipeline from [`RunOptions`] (what `eventpipe run` does);
//!   [`replay()`] runs one [`TenantStage`] over a recorded stream (`eventpipe replay`).
//! - [`EventBroadcaster`] and [`EventRecorder`] are client-go's recording API:
//!   `start_recording_to_sink` attaches the same tenant stage to any [`EventSink`] (whose
//!   calls answer what they [`Stored`]: the event as sent, or the sink's own copy).
//! - [`EventCorrelator`] is client-go's correlator (aggregator → logger → spam filter), with
//!   its key functions pluggable ([`correlator`]).
//! - [`watch_cache`] is the apiserver's Cacher for what eventpipe wrote: the correlated Events
//!   with resourceVersions, a [`window::Window`] of changes that watchers resume from, and the
//!   Kubernetes read API (`run --serve`) that kubectl and informers read.
//! - [`TenantPlan`] is what tenants run: rules from the command line ([`CommandLineRules`]) and
//!   the [`Config`], plugins from the [`PluginRegistry`], sinks from [`SinkSpec`]s.
//!
//! Modules sit in layers; each imports only modules below it (the README lists them).

pub mod bench;
pub mod broadcaster;
pub mod clock;
pub mod config;
pub mod correlator;
pub mod delivery;
pub mod event;
pub mod event_broadcaster;
pub mod golden;
pub mod health;
pub mod k8s;
pub mod logging;
pub mod metrics;
pub mod nats;
pub mod partition;
pub mod plan;
pub mod plugin;
pub mod recorder;
pub mod reload;
pub mod replay;
pub mod router;
pub mod rules;
pub mod run;
pub mod scaffold;
pub mod scale;
pub mod series;
pub mod sink;
pub mod source;
pub mod stage;
pub mod suppressed;
pub mod tenant;
pub mod top;
pub mod validate;
pub mod watch_cache;
pub mod watchers;
pub mod window;

pub use broadcaster::{Broadcaster, FullChannelBehavior, WatchEvent, WatchEventType, Watcher};
pub use config::Config;
pub use correlator::{CorrelatorOptions, EventCorrelateResult, EventCorrelator};
pub use delivery::{Delivery, DeliveryMode};
pub use event::Event;
pub use event_broadcaster::{EventBroadcaster, EventBroadcasterOptions};
pub use partition::PartitionKey;
pub use plan::{CommandLineRules, TenantPlan, TenantRules};
pub use plugin::registry::PluginRegistry;
pub use plugin::{PluginKind, PluginRuntime, PluginSettings};
pub use recorder::EventRecorder;
pub use replay::{ReplayOptions, replay};
pub use router::RouterStats;
pub use run::{RunOptions, RunSummary, run};
pub use sink::{EventSink, SinkSpec, Stored};
pub use source::{Source, SourceSpec, SourceStats};
pub use stage::TenantStage;
