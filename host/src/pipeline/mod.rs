//! The tenant pipeline above the Broadcaster: what each event goes through after a source put it
//! in the incoming queue.
//!
//! - [`plan`]: what tenants run ([`TenantPlan`](plan::TenantPlan)): rules from the command line
//!   and the config, plugins from the registry, sinks from their specs.
//! - [`stage`]: one tenant's [`TenantStage`](stage::TenantStage): drop/keep rules, Wasm filters,
//!   keys (memoised), the EventCorrelator per sink.
//! - [`router`]: the tenant router watcher, sharding events by partition key across worker
//!   threads, writing results to every sink of the tenant, acknowledging what sinks stored.
//! - [`routes`]: routes, which send a tenant's correlated writes to more sinks.
//! - [`suppressed`]: summaries of what a tenant's rules dropped.
//! - [`scale`]: the same router across hosts: the NATS JetStream publish tier and worker tier.
//! - [`sequence_chain`]: the publish tier's order check (`Nats-Expected-Last-Sequence`).

pub mod plan;
pub mod router;
pub mod routes;
pub mod scale;
pub mod sequence_chain;
pub mod stage;
pub mod suppressed;
