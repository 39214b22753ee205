//! `eventpipe run`: source → Broadcaster → tenant router watcher (filters → EventCorrelator per
//! tenant and sink → EventSink), with plugins and the tenant config hot-reloaded. The pieces
//! and their order are the running topology's ([`crate::topology`]).

pub use crate::topology::{
    DeliveryOptions, Handover, KubernetesOptions, LimitOptions, PluginOptions, Role, RunError, RunOptions, RunSummary,
    ScaleOptions, ServingOptions, SourceOptions, run_elected,
};

/// Runs the pipeline until the source ends, then shuts the Broadcaster down (draining it) and
/// waits for the sink watcher to finish. With `watch`, plugin files and the config are
/// hot-reloaded meanwhile (compiled and validated on a thread of their own).
///
/// # Errors
/// [`RunError`] when the config, a plugin rule or a sink is invalid at start, or the source or
/// a sink cannot be read or flushed.
pub async fn run(options: RunOptions) -> Result<RunSummary, RunError> {
    crate::topology::build(options).await?.run().await
}
