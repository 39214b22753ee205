//! The running topology of `eventpipe run`: pieces built from the options, and one owner of
//! their start, reload and shutdown order (in the manner of Vector's `src/topology`: `builder`
//! builds the pieces from a validated config, `running` starts and stops them).
//!
//! # The split
//!
//! - [`options`]: [`RunOptions`], grouped by concern (source, Kubernetes, delivery, scale-out,
//!   serving, tenants and plugins, limits).
//! - [`role`]: what this process is, chosen once from the options: a single host, the NATS
//!   publish tier or the NATS worker tier ([`Role`]), with what each role needs.
//! - The pieces, each a small type with a `build` and a `start` or `run(shutdown)`, each
//!   registering its own counters on `/metrics`:
//!   - `checkpoint`: the checkpointer (at-least-once: the saved position restored and saved
//!     again, the correlator snapshots of a single host; otherwise the periodic sink flush);
//!   - `sinks`: the Kubernetes client, the watch cache and the [`SinkSet`](crate::sink::set::SinkSet);
//!   - `reloader`: the tenant plan and its hot reload (plugins directory, config file);
//!   - `tier`: the Broadcaster and what watches it for the tenants: the tenant router or the
//!     publish tier; the worker tier in place of a source;
//!   - `watchers`: watcher plugins (on the Broadcaster or on the results);
//!   - `servers`: `/metrics`, the probes and the read API (`--metrics`, `--serve`), the watch
//!     cache's expiry, readiness;
//!   - `source`: the source task (or the worker tier's consumers).
//! - [`leader`]: leader election on a `coordination.k8s.io/v1` Lease (`run --leader-elect`),
//!   as client-go `leaderelection`: the pipeline runs only while the process leads.
//! - [`running`]: [`RunningTopology`] owns them: it runs the source, then drains in order —
//!   source → Broadcaster → router → sinks, then the checkpoint — within the shutdown timeout,
//!   and produces the [`RunSummary`].
//!
//! Start order (as the pieces depend on each other): role → checkpoint restore → signals →
//! config → Kubernetes client → shadows → watch cache and sinks → plan and reloader →
//! Broadcaster, checkpointer, router → watchers → metrics and servers → periodic checkpoint →
//! source.

mod builder;
mod checkpoint;
mod elected;
pub mod leader;
pub mod options;
mod reloader;
pub mod role;
pub mod running;
mod servers;
mod sinks;
mod source;
mod tier;
mod watchers;

pub use builder::build;
pub use elected::run_elected;
pub use options::{
    DeliveryOptions, Handover, KubernetesOptions, LimitOptions, PluginOptions, RunOptions, ScaleOptions,
    ServingOptions, SourceOptions,
};
pub use role::Role;
pub use running::{RunSummary, RunningTopology};

use crate::config::ConfigError;
use crate::pipeline::plan::PlanError;
use crate::reload::WatchError;
use crate::source::SourceError;

/// Why a run failed to start or finish (bad lines and sink errors never fail a run).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The source could not be opened or read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The address of `--metrics` or `--serve` could not be served.
    #[error("{flag} {addr}: {error}")]
    Listen {
        /// The flag that gave the address (`--metrics`, `--serve`).
        flag: &'static str,
        /// The address.
        addr: std::net::SocketAddr,
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
    /// A watch cache setting is out of range (a budget or bookmark interval that is not a
    /// positive number of seconds).
    #[error("{0}")]
    WatchCache(String),
    /// An enrichment glob does not compile (`--enrich-labels`, …).
    #[error(transparent)]
    Enrich(#[from] crate::k8s::enrich::EnrichError),
    /// The Kubernetes API cannot be reached.
    #[error(transparent)]
    Kubernetes(#[from] crate::k8s::ConnectError),
    /// Leader-election terms client-go refuses
    /// ([`leader::LeaderElectionConfig::validate`]'s sentence).
    #[error("{0}")]
    Leader(String),
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
    /// A shadow plugin could not be set (a missing plugin, a candidate that does not load or is
    /// of another kind, a diffs file that cannot be created).
    #[error("shadow plugin {plugin}: {message}")]
    Shadow {
        /// The plugin name (or the diffs file).
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// A watcher plugin could not be attached.
    #[error("watcher plugin {plugin}: {message}")]
    WatcherPlugin {
        /// The plugin name or file, as given.
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// The sink watcher's task panicked or was cancelled.
    #[error("sink watcher failed: {0}")]
    Watcher(#[from] tokio::task::JoinError),
    /// NATS JetStream cannot be reached or set up ([`crate::pipeline::scale`]).
    #[error(transparent)]
    Nats(#[from] crate::nats::NatsError),
    /// The scale-out is given inconsistently (a `nats:` sink beside others, `--worker` without
    /// a `nats:` source, …).
    #[error("scale-out: {0}")]
    Scale(String),
}

/// Prints a line about what is live (stderr, always) and logs it.
fn announce(line: &str) {
    eprintln!("eventpipe: {line}");
    tracing::info!("{line}");
}
